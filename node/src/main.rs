//! The `peerage` binary: parses the command line, sets up logging (stderr) and runs
//! `peerage run` or `peerage swarm`. Errors end here as one message (each cause printed
//! once) and an exit code ([`exit_code`], the README's usage section): 0 after a clean stop
//! (Ctrl-C or SIGTERM), 1 for a run-time failure, 2 for bad flags or configuration, 3 when
//! the identity key file is in use by another running node.

use anyhow::Context as _;
use clap::Parser;
use peerage_node::cli::{
    Cli, Command, DeployArgs, DeployTarget, ReportArgs, ReportCommand, RunArgs, ShardTransportArg, SwarmArgs,
    SwarmLatency, SwarmTransport, TestbedArgs, TestbedCommand,
};
use peerage_node::config::FileConfig;
use peerage_node::runtime::status::StatusSink;
use peerage_node::runtime::{metrics, node};
use peerage_node::swarm::runner::{self as swarm_runner, Kill, LocalSwarmConfig, SwarmOptions};
use peerage_node::{identity, TransportKind};
use std::io::Write as _;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

/// jemalloc instead of glibc's malloc: a 1,000-node `peerage swarm` spent about a third of
/// its steady-state CPU in glibc's `free` (arena lock waits, chunk consolidation) under the
/// many small buffers libp2p allocates and drops.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let cli = Cli::parse();
    let default_log = match cli.command {
        // libp2p's request-response warns once per inbound stream it drops at the
        // concurrent-stream limit: a hostile peer would write the log; the guard summarises
        // misbehaviour per peer instead (`node/src/net/guard.rs`).
        Command::Run(_) => "info,libp2p_request_response=error",
        Command::Swarm(_) | Command::Report(_) | Command::Testbed(_) | Command::Deploy(_) => {
            "warn,libp2p_request_response=error"
        }
    };
    // An explicit --log wins over RUST_LOG, which wins over the subcommand's default.
    let log = match (&cli.log, std::env::var("RUST_LOG")) {
        (Some(flag), _) => flag.clone(),
        (None, Ok(env)) if !env.is_empty() => env,
        _ => default_log.to_string(),
    };
    let filter = match EnvFilter::try_new(&log) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("peerage: error: bad log filter {log:?} (--log or RUST_LOG): {e}");
            std::process::exit(2);
        }
    };
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("peerage: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = match cli.command {
        Command::Run(args) => rt.block_on(run(args)),
        Command::Swarm(args) => rt.block_on(swarm(args)),
        Command::Report(args) => report(args),
        Command::Testbed(args) => rt.block_on(testbed(args)),
        Command::Deploy(args) => deploy(args),
    };
    if let Err(e) = result {
        eprintln!("peerage: error: {}", causes(&e));
        std::process::exit(exit_code(&e));
    }
}

/// Exit code for a run-time failure.
const EXIT_FAILURE: i32 = 1;
/// Exit code for bad flags or configuration (clap's own code for bad flags).
const EXIT_USAGE: i32 = 2;
/// Exit code when the identity key file is held by another running node.
const EXIT_IDENTITY_IN_USE: i32 = 3;

/// The exit code for `e`, by the first cause that says.
fn exit_code(e: &anyhow::Error) -> i32 {
    use peerage_node::config::emulation::EmulationError;
    use peerage_node::config::ConfigError;
    for cause in e.chain() {
        if matches!(cause.downcast_ref::<identity::IdentityError>(), Some(identity::IdentityError::InUse { .. })) {
            return EXIT_IDENTITY_IN_USE;
        }
        if cause.is::<ConfigError>() || cause.is::<EmulationError>() {
            return EXIT_USAGE;
        }
    }
    EXIT_FAILURE
}

/// `e` and its causes, `: `-separated, leaving out a cause whose text the message already
/// holds (errors that print their source as part of their own text).
fn causes(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn merge(args: &RunArgs) -> anyhow::Result<FileConfig> {
    let mut fc = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    if !args.listen.is_empty() {
        fc.listen = args.listen.clone();
    }
    if !args.bootstrap.is_empty() {
        fc.bootstrap = args.bootstrap.clone();
    }
    if let Some(a) = &args.algorithm {
        fc.algorithm = Some(a.clone());
    }
    if let Some(p) = args.priority {
        fc.priority = p;
    }
    if let Some(i) = &args.identity {
        fc.identity = Some(i.clone());
    }
    if let Some(m) = &args.metrics {
        fc.metrics = Some(m.clone());
    }
    if let Some(k) = &args.kad_protocol {
        fc.kad_protocol = k.clone();
    }
    if let Some(s) = args.scope {
        fc.scope = s;
    }
    if let Some(a) = args.alive_interval_ms {
        fc.election.alive_interval_ms = a;
    }
    if let Some(m) = &args.superpeers {
        use peerage_node::config::superpeer::SuperPeerMode;
        match m.parse::<SuperPeerMode>()? {
            SuperPeerMode::Off => fc.superpeer = None,
            SuperPeerMode::On(method) => fc.superpeer.get_or_insert_with(Default::default).method = method,
        }
    }
    if args.sp_share.is_some() || args.sp_cap.is_some() {
        let Some(sp) = fc.superpeer.as_mut() else {
            anyhow::bail!(
                "--sp-share and --sp-cap need super peers on: --superpeers prefix|tokens or a [superpeer] table"
            );
        };
        if let Some(x) = args.sp_share {
            sp.share = x;
        }
        if let Some(c) = args.sp_cap {
            sp.cluster_cap = c;
        }
    }
    let em = &mut fc.emulation;
    if let Some(l) = args.latency {
        em.latency = Some(match l {
            SwarmLatency::None => "none".into(),
            SwarmLatency::Internet => "internet".into(),
        });
    }
    em.model_nodes = args.model_nodes.or(em.model_nodes);
    em.model_seed = args.model_seed.or(em.model_seed);
    em.swarm_seed = args.swarm_seed.or(em.swarm_seed);
    em.node_index = args.node_index.or(em.node_index);
    Ok(fc)
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let fc = merge(&args)?;
    let emulation = fc.emulation.clone();
    let cfg = fc.resolve()?;
    let swarm_key = emulation.swarm_key(cfg.directory.id_difficulty)?;
    if swarm_key.is_some() && cfg.identity.is_some() {
        return Err(peerage_node::config::emulation::EmulationError::TwoIdentities.into());
    }
    // The key file stays locked while `_held` lives: until the node has stopped.
    let mut _held = None;
    let key = match (swarm_key, &cfg.identity) {
        (Some(key), _) => key,
        (None, Some(path)) => {
            let id = identity::open_locked(path, cfg.directory.id_difficulty)?;
            if id.created {
                tracing::info!(path = %path.display(), "created a new identity key");
            }
            let key = id.key.clone();
            _held = Some(id);
            key
        }
        (None, None) => {
            tracing::info!("no --identity file: using a fresh identity for this run");
            identity::generate(cfg.directory.id_difficulty)
        }
    };
    let peer = key.public().to_peer_id();
    let latency = emulation.link(&key, cfg.directory.id_difficulty)?;
    if let Some(l) = &latency {
        tracing::info!(place = l.local, nodes = l.net.model().len(), seed = l.net.seed(), "emulating Internet latency");
    }
    let metrics = match cfg.metrics {
        Some(addr) => {
            let (m, registry) = metrics::Metrics::new();
            let bound = metrics::serve(addr, registry)?;
            tracing::info!(%bound, "serving Prometheus metrics");
            Some(m)
        }
        None => None,
    };
    let seed = rand::random();
    let mut handle = node::spawn(node::NodeOptions {
        cfg,
        key,
        transport: TransportKind::TcpQuic,
        status: StatusSink::stdout(peer.to_string()),
        metrics,
        seed,
        latency,
    })?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => {
            r.context("cannot listen for Ctrl-C")?;
            tracing::info!("Ctrl-C: shutting down");
            handle.shutdown().await;
            Ok(())
        }
        _ = term.recv() => {
            tracing::info!("SIGTERM: shutting down");
            handle.shutdown().await;
            Ok(())
        }
        _ = handle.wait() => {
            match handle.probe.get().fatal {
                Some(f) => anyhow::bail!("{f}"),
                None => anyhow::bail!("the node stopped unexpectedly"),
            }
        }
    }
}

async fn swarm(args: SwarmArgs) -> anyhow::Result<()> {
    let algorithm: overlay::Algorithm = args.algorithm.parse()?;
    let mut election = overlay::ElectionConfig::for_algorithm(algorithm);
    if let Some(a) = args.alive_interval_ms {
        election.alive_interval_ms = a;
    }
    election.validate()?;
    let seed = args.seed.unwrap_or_else(rand::random);
    eprintln!("peerage swarm: {} nodes, {algorithm}, seed {seed}", args.nodes);
    let n = args.nodes as usize;
    let mut sc = LocalSwarmConfig::new(n, election, seed);
    sc.transport = match args.transport {
        SwarmTransport::Memory => TransportKind::Memory,
        SwarmTransport::Tcp => TransportKind::TcpQuic,
    };
    if args.ranked {
        sc.priorities = Some((0..n as u64).collect());
    }
    if args.latency_seed.is_some() && args.latency == SwarmLatency::None {
        anyhow::bail!("--latency-seed needs --latency internet");
    }
    if args.latency == SwarmLatency::Internet {
        let s = args.latency_seed.unwrap_or(seed);
        eprintln!("peerage swarm: emulated Internet latency, model seed {s}");
        sc.latency_seed = Some(s);
    }
    let emulated = args.latency == SwarmLatency::Internet;
    sc.template.timing.ping_s = peerage_node::swarm::runner::swarm_ping_s(u64::from(args.nodes), emulated);
    if let Some(k) = args.coord_peers {
        let l = &mut sc.template.limits;
        l.target_low = k;
        l.set_target_high(l.target_high.max(2 * k));
    }
    if let Some(h) = args.prune_above {
        let l = &mut sc.template.limits;
        if h < l.target_low {
            anyhow::bail!("--prune-above {h} is below the {} connections a node keeps (--coord-peers)", l.target_low);
        }
        l.set_target_high(h);
    }
    if let Some(ms) = args.idle_timeout_ms {
        sc.template.limits.idle_timeout_ms = ms;
    }
    if let Some(p) = args.ping_s {
        sc.template.timing.ping_s = p;
    }
    sc.template.limits.rotate_ms = match (args.rotate_s, args.latency) {
        (Some(s), _) => Some(s.saturating_mul(1000)),
        (None, SwarmLatency::Internet) => {
            Some(peerage_node::swarm::runner::swarm_rotate_ms(u64::from(args.nodes), sc.template.timing.ping_s))
        }
        (None, SwarmLatency::None) => Some(0),
    };
    if let Some(f) = args.members_push_fanout {
        sc.template.timing.members_push_fanout = f;
    }
    if args.no_leader_election {
        sc.template.timing.leader_election = false;
    }
    let mut kills: Vec<Kill> =
        args.kill_leader_at.iter().map(|&s| Ok(Kill::Leader { at: secs(s)? })).collect::<anyhow::Result<_>>()?;
    if let Some(f) = args.kill_fraction {
        if !(0.0..=1.0).contains(&f) {
            anyhow::bail!("--kill-fraction must be between 0 and 1, got {f}");
        }
        kills.push(Kill::Fraction { fraction: f, at: secs(args.kill_fraction_at)? });
    }
    kills.sort_by_key(|k| match k {
        Kill::Leader { at } | Kill::Fraction { at, .. } => *at,
    });
    let superpeers = superpeer_phase(&args, n, seed, &mut sc, !kills.is_empty())?;
    if let (Some(h), None, None) = (
        peerage_node::swarm::runner::swarm_prune_above(emulated, superpeers.is_some()),
        args.prune_above,
        args.coord_peers,
    ) {
        sc.template.limits.set_target_high(h);
    }
    sc.shard = shard_plan(&args).await?;
    let per_process = sc.shard.as_ref().map_or(n, |p| n.div_ceil(p.count));
    if per_process > MAX_NODES_PER_PROCESS {
        anyhow::bail!(
            "{per_process} nodes in one process: at most {MAX_NODES_PER_PROCESS} (use --shard i/M with more shards)"
        );
    }
    if sc.shard.is_some() {
        sc.transport = TransportKind::TcpQuic;
    }
    let http = match args.http {
        Some(addr) => {
            let h = peerage_node::swarm::serve::SwarmHttp::serve(addr, sc.shard.as_ref().map_or(0, |p| p.index))?;
            eprintln!("peerage swarm: serving /metrics and /part on {}", h.bound);
            Some(h)
        }
        None => None,
    };
    if let Some(plan) = sc.shard.as_ref().filter(|p| p.index > 0) {
        eprintln!("peerage swarm: shard {}/{}, conductor at {}", plan.index, plan.count, plan.control);
        let part = peerage_node::swarm::worker::work(&sc, http.as_ref()).await?;
        write_json(&part, args.out.as_deref())?;
        return linger(http.as_deref(), &part, args.linger).await;
    }
    let run = swarm_runner::run_key(&sc);
    let sharded = sc.shard.is_some();
    let mut report = swarm_runner::run(SwarmOptions {
        swarm: sc,
        timeout: Duration::from_secs(args.timeout_s),
        settle: Duration::from_secs(args.settle_s),
        measure: Duration::from_secs(args.measure_s.max(1)),
        kills,
        progress: !args.quiet,
        superpeers,
        hold: secs(args.hold_s)?,
        http: http.clone(),
    })
    .await?;
    if let (Some(out), Some(sp)) = (args.out.as_deref(), &report.superpeers) {
        for f in peerage_node::superpeer::rows::write(out, report.nodes, report.seed, sp)? {
            eprintln!("peerage swarm: wrote {}", f.display());
        }
    }
    if sharded {
        // Shard 0's part: the swarm's report, and its own nodes' rows beside it.
        let nodes = std::mem::take(&mut report.node_rows);
        let part = peerage_node::swarm::merge::ReportPart {
            part_version: peerage_node::swarm::merge::PART_VERSION,
            run,
            shard: 0,
            t0_unix_ms: report.started_unix_ms,
            report: Some(serde_json::to_value(&report)?),
            nodes,
        };
        write_json(&part, args.out.as_deref())?;
        linger(http.as_deref(), &part, args.linger).await?;
    } else {
        write_json(&report, args.out.as_deref())?;
    }
    if let Some(sp) = &report.superpeers {
        if sp.converged_s.is_none() {
            anyhow::bail!("super-peer selection did not converge within {} s", args.timeout_s);
        }
        if sp.kill.as_ref().is_some_and(|k| k.restored_s.is_none()) {
            anyhow::bail!("killed super peers were not replaced within {} s", args.timeout_s);
        }
        if sp.kill.as_ref().is_some_and(|k| k.settled_s.is_none()) {
            anyhow::bail!("the swarm did not settle within {} s after the kill", args.timeout_s);
        }
        return Ok(());
    }
    if report.leader_agreed_s.is_none() {
        anyhow::bail!("the swarm did not agree on a leader within {} s", args.timeout_s);
    }
    Ok(())
}

/// Print `value` as pretty JSON, and write it to `out` too.
fn write_json<T: serde::Serialize>(value: &T, out: Option<&std::path::Path>) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    // A closed stdout (a reader that stopped early) loses the printout, not the file.
    let _ = writeln!(std::io::stdout().lock(), "{text}");
    if let Some(p) = out {
        std::fs::write(p, &text).with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

/// Put `part` on `/part` and, with `--linger`, keep serving until SIGTERM or Ctrl-C.
async fn linger<T: serde::Serialize>(
    http: Option<&peerage_node::swarm::serve::SwarmHttp>,
    part: &T,
    linger: bool,
) -> anyhow::Result<()> {
    let Some(h) = http else { return Ok(()) };
    h.set_part(serde_json::to_string(part)?);
    if linger {
        eprintln!("peerage swarm: done; serving /part until stopped");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    Ok(())
}

/// `--shard` and friends.
async fn shard_plan(args: &SwarmArgs) -> anyhow::Result<Option<peerage_node::swarm::shard::ShardPlan>> {
    use peerage_node::swarm::shard::{parse_shard, resolve_hosts, ShardPlan, ShardTransport};
    let Some(s) = &args.shard else { return Ok(None) };
    let (index, count) = parse_shard(s)?;
    if args.seed.is_none() {
        anyhow::bail!("--shard needs --seed: every shard must run the same swarm");
    }
    let join_timeout = Duration::from_secs(args.join_timeout_s);
    let hosts = resolve_hosts(&args.shard_hosts, join_timeout).await?;
    let plan = ShardPlan {
        index,
        count,
        hosts,
        port_base: args.port_base,
        transport: match args.shard_transport {
            ShardTransportArg::Tcp => ShardTransport::Tcp,
            ShardTransportArg::Quic => ShardTransport::Quic,
        },
        control: args.control.parse().map_err(|e: String| anyhow::anyhow!(e))?,
        join_timeout,
    };
    plan.validate(args.nodes as usize)?;
    Ok(Some(plan))
}

/// `peerage testbed`: the work runs on a blocking thread; Ctrl-C or SIGTERM raise `stop`,
/// the work returns, and the testbed's tear-down (on drop) removes everything it made.
async fn testbed(args: TestbedArgs) -> anyhow::Result<()> {
    use peerage_node::testbed::{self, swarm as tbswarm, Testbed};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("peerage testbed: interrupted; tearing down");
        s.store(true, Ordering::Relaxed);
    });
    let binary = std::env::current_exe().context("cannot find the peerage binary")?;
    let work = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let create = |hosts: u32| Testbed::create(hosts as usize).map_err(|e| anyhow::anyhow!(tbswarm::explain(&e)));
        match args.command {
            TestbedCommand::Clean => {
                let removed = testbed::clean_all().map_err(|e| anyhow::anyhow!(tbswarm::explain(&e)))?;
                eprintln!("peerage testbed: removed {} namespaces {removed:?}", removed.len());
                Ok(())
            }
            TestbedCommand::Swarm {
                hosts,
                nodes,
                seed,
                out,
                partition_after_s,
                partition_s,
                heal_settle_s,
                timeout_s,
                port_base,
                swarm_args,
            } => {
                let mut tb = create(hosts)?;
                eprintln!("peerage testbed {}: {hosts} hosts, {nodes} nodes, seed {seed}", tb.tag());
                let run = tbswarm::SwarmRun {
                    binary,
                    nodes: nodes as usize,
                    seed,
                    swarm_args,
                    dir: out,
                    partition: partition_after_s.map(|after_s| tbswarm::Partition {
                        after_s,
                        for_s: partition_s,
                        settle_s: heal_settle_s,
                    }),
                    timeout: Duration::from_secs(timeout_s),
                    port_base,
                };
                let result = tbswarm::run(&mut tb, &run, &stop);
                tb.teardown(testbed::GRACE).map_err(|e| anyhow::anyhow!(tbswarm::explain(&e)))?;
                let report = result?;
                eprintln!("peerage testbed: merged report {}", report.display());
                Ok(())
            }
            TestbedCommand::Exec { hosts, logs, command } => {
                let mut tb = create(hosts)?;
                let all: Vec<String> = (0..hosts as usize).map(|h| tb.addr(h).to_string()).collect();
                std::fs::create_dir_all(&logs)?;
                for h in 0..hosts as usize {
                    let env =
                        [("PEERAGE_HOST".to_string(), h.to_string()), ("PEERAGE_HOSTS".to_string(), all.join(","))];
                    tb.spawn(h, &command, &env, &logs.join(format!("host-{h}.log")))?;
                }
                eprintln!("peerage testbed {}: {hosts} hosts {all:?} running {command:?}", tb.tag());
                while !stop.load(Ordering::Relaxed) && tb.procs().iter_mut().any(|p| p.try_wait().is_none()) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                tb.teardown(testbed::GRACE).map_err(|e| anyhow::anyhow!(tbswarm::explain(&e)))?;
                Ok(())
            }
        }
    });
    work.await?
}

/// `peerage deploy k8s|compose`.
fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    use peerage_node::deploy::{compose, k8s, DeployParams};
    let (c, kube) = match args.target {
        DeployTarget::K8s(c) => (c, true),
        DeployTarget::Compose(c) => (c, false),
    };
    let p = DeployParams {
        nodes: c.nodes,
        shards: c.shards,
        seed: c.seed,
        image: c.image,
        name: c.name,
        namespace: c.namespace,
        port_base: c.port_base,
        control_port: c.control_port,
        http_port: c.http_port,
        shard_transport: match c.shard_transport {
            ShardTransportArg::Tcp => "tcp".into(),
            ShardTransportArg::Quic => "quic".into(),
        },
        swarm_args: c.swarm_args,
        cpu: c.cpu,
        memory: c.memory,
    };
    let text = if kube { k8s(&p)? } else { compose(&p)? };
    match &c.out {
        Some(path) => std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?,
        None => {
            let _ = write!(std::io::stdout().lock(), "{text}");
        }
    }
    Ok(())
}

/// `peerage report merge`.
fn report(args: ReportArgs) -> anyhow::Result<()> {
    use peerage_node::swarm::heal::FaultEvent;
    use peerage_node::swarm::merge::{merge, ReportPart};
    let ReportCommand::Merge { parts, events, out } = args.command;
    let mut files = Vec::new();
    for p in parts {
        if p.is_dir() {
            let mut in_dir: Vec<_> = std::fs::read_dir(&p)
                .with_context(|| format!("cannot read {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            in_dir.sort();
            files.extend(in_dir);
        } else {
            files.push(p);
        }
    }
    let mut loaded = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        let part: ReportPart =
            serde_json::from_str(&text).with_context(|| format!("{} is not a swarm report part", f.display()))?;
        loaded.push(part);
    }
    let events: Vec<FaultEvent> = match &events {
        None => Vec::new(),
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("cannot read {}", p.display()))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).with_context(|| format!("{} line {}: not an event", p.display(), i + 1))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let merged = merge(loaded, &events)?;
    write_json(&merged, out.as_deref())
}

/// `--superpeers` and friends: the nodes' `[superpeer]` settings and the report phase.
fn superpeer_phase(
    args: &SwarmArgs,
    n: usize,
    seed: u64,
    sc: &mut LocalSwarmConfig,
    leader_kills: bool,
) -> anyhow::Result<Option<peerage_node::superpeer::report::SpPhaseOptions>> {
    use peerage_node::config::superpeer::SuperPeerMode;
    let mode: SuperPeerMode = args.superpeers.parse()?;
    let method = match mode {
        SuperPeerMode::Off => {
            if args.kill_superpeers.is_some()
                || args.sp_share.is_some()
                || args.sp_cap.is_some()
                || args.sp_start_delay_s.is_some()
                || args.sp_config.is_some()
                || args.sp_known_size
                || args.no_leader_election
            {
                anyhow::bail!(
                    "--kill-superpeers, --sp-share, --sp-cap, --sp-start-delay-s, --sp-config, \
                     --sp-known-size and --no-leader-election need --superpeers prefix|tokens"
                );
            }
            return Ok(None);
        }
        SuperPeerMode::On(m) => m,
    };
    if leader_kills {
        anyhow::bail!("--kill-leader-at / --kill-fraction do not combine with --superpeers; use --kill-superpeers");
    }
    if let Some(f) = args.kill_superpeers {
        if !(f > 0.0 && f <= 1.0) {
            anyhow::bail!("--kill-superpeers must be in (0, 1], got {f}");
        }
    }
    let mut sp = match &args.sp_config {
        Some(path) => read_sp_config(path)?,
        None => overlay::superpeer::SuperPeerConfig::default(),
    };
    sp.method = method;
    // A swarm is small: a larger share than the table's default, and clusters capped at twice
    // the mean unless a file or a flag says otherwise.
    if args.sp_config.is_none() || args.sp_share.is_some() {
        sp.share = args.sp_share.unwrap_or(0.05);
        sp.cluster_cap = ((2.0 / sp.share).ceil() as u32).max(4);
    }
    if let Some(c) = args.sp_cap {
        sp.cluster_cap = c;
    }
    if args.sp_known_size {
        sp.estimate.known_size = n as u64;
    }
    sp.validate()?;
    let cap = sp.cluster_cap;
    sc.template.superpeer = Some(sp);
    // Nodes join over a few seconds; give the routing tables time before the estimate.
    sc.template.timing.superpeer_start_ms = match args.sp_start_delay_s {
        Some(d) => secs(d)?.as_millis().min(u64::MAX as u128) as u64,
        None => (2_000 + 20 * n as u64).min(30_000),
    };

    Ok(Some(peerage_node::superpeer::report::SpPhaseOptions {
        cluster_cap: cap,
        method: method.name().to_string(),
        stable: secs(args.sp_stable_s)?,
        timeout: Duration::from_secs(args.timeout_s),
        kill_fraction: args.kill_superpeers,
        kill_at: secs(args.kill_superpeers_at)?,
        seed,
    }))
}

/// The `[superpeer]` table of a TOML file (absent: the defaults); its other tables are ignored.
fn read_sp_config(path: &std::path::Path) -> anyhow::Result<overlay::superpeer::SuperPeerConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let f: overlay::superpeer::SuperPeerFile =
        toml::from_str(&text).with_context(|| format!("{}: bad [superpeer] table", path.display()))?;
    Ok(f.superpeer)
}

/// Most nodes one process runs (descriptors, memory, the CPU of one machine).
const MAX_NODES_PER_PROCESS: usize = 5000;

fn secs(s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| anyhow::anyhow!("bad time {s} s: must be a non-negative number"))
}
