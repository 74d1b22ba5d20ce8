//! A shard other than 0 (`peerage swarm --shard i/M`, i > 0): joins the conductor, starts its
//! slice of the swarm at the common start, sends its nodes' snapshots every
//! [`control::PUSH_EVERY`], crashes the nodes the conductor names, and at the stop (or when
//! the conductor is gone, or on Ctrl-C/SIGTERM) writes its part of the report: its nodes'
//! rows (`node/src/swarm/rows.rs`).

use crate::swarm::control::{self, ToConductor, ToShard};
use crate::swarm::merge::{ReportPart, PART_VERSION};
use crate::swarm::runner::{run_key, LocalSwarm, LocalSwarmConfig};
use crate::swarm::serve::SwarmHttp;
use crate::swarm::shard;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// How long the nodes get to stop cleanly at the end.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Run this shard until the conductor stops it; returns its part of the report.
pub async fn work(cfg: &LocalSwarmConfig, http: Option<&Arc<SwarmHttp>>) -> anyhow::Result<ReportPart> {
    let plan = cfg.shard.as_ref().ok_or_else(|| anyhow::anyhow!("a shard worker needs --shard i/M"))?;
    let run = run_key(cfg);
    let joined = shard::join(plan, run).await?;
    tokio::time::sleep(joined.delay).await;
    let t0 = Instant::now();
    let mut swarm = LocalSwarm::start_with(cfg, None).await?;
    info!(shard = plan.index, nodes = swarm.local_nodes().len(), "shard started");
    let log = swarm.role_log(t0);
    let observer = http.map(|h| h.observe(swarm.local_probes()));
    let (mut rd, mut wr) = tokio::io::split(joined.stream);
    let (tx, mut commands) = mpsc::unbounded_channel::<Option<ToShard>>();
    let reader = tokio::spawn(async move {
        loop {
            match control::recv::<_, ToShard>(&mut rd).await {
                Ok(Some(m)) => {
                    if tx.send(Some(m)).is_err() {
                        break;
                    }
                }
                Ok(None) | Err(_) => {
                    let _ = tx.send(None);
                    break;
                }
            }
        }
    });
    let mut tick = tokio::time::interval(control::PUSH_EVERY);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let (snaps, gone) = swarm.local_snapshots();
                let b = shard::batch(snaps, gone, swarm.latency_net().map(|n| &**n));
                if let Err(e) = control::send(&mut wr, &ToConductor::Batch(b)).await {
                    warn!("the conductor is gone ({e}); stopping");
                    break;
                }
            }
            cmd = commands.recv() => match cmd.flatten() {
                Some(ToShard::Crash { node }) if plan.here(node) => swarm.crash(node),
                Some(ToShard::Stop) => break,
                Some(other) => warn!("unexpected control message {other:?}"),
                None => {
                    warn!("the conductor closed the control channel; stopping");
                    break;
                }
            },
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    reader.abort();
    if let Some(o) = observer {
        o.abort();
    }
    let nodes = swarm.rows(log.finish());
    let _ = tokio::time::timeout(STOP_GRACE, swarm.shutdown()).await;
    Ok(ReportPart {
        part_version: PART_VERSION,
        run,
        shard: plan.index,
        t0_unix_ms: joined.t0_unix_ms,
        report: None,
        nodes,
    })
}
