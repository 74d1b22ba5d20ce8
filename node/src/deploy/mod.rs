//! `peerage deploy k8s|compose`: cluster manifests for a sharded swarm, generated from the same
//! parameters as `peerage swarm`, so they cannot drift from the command line: every shard's
//! command is built here and parsed back with the real `peerage` parser before anything is
//! written (a flag the binary would refuse is refused here).
//!
//! - **Kubernetes** ([`k8s`]): a headless Service (stable DNS names `NAME-i.NAME.NS.svc`, also
//!   before the pods are ready: the shards find each other while starting); a StatefulSet of M
//!   shard pods (parallel start; pod `NAME-i` runs shard i, its index from the
//!   `apps.kubernetes.io/pod-index` label, Kubernetes 1.28 or newer), non-root, with Prometheus
//!   scrape annotations on the shards' `/metrics`; and a Job that fetches every shard's `/part`
//!   when the run is over and prints the merged report (`kubectl logs job/NAME-collect`).
//! - **Compose** ([`compose`]): one service per shard on one Docker host (up to about 100
//!   containers), the parts written to a bind-mounted `./out`, merged on the host with
//!   `peerage report merge out/`.
//!
//! The image is `deploy/Dockerfile` (the release binary on a distroless, non-root base).

use crate::cli::{Cli, Command as CliCommand};
use clap::Parser;
use serde_json::{json, Value};

/// What both generators need: the swarm's parameters and where it runs.
#[derive(Debug, Clone)]
pub struct DeployParams {
    pub nodes: u32,
    pub shards: u32,
    pub seed: u64,
    pub image: String,
    /// Resource names (Service, StatefulSet, Job) and the pods' prefix.
    pub name: String,
    pub namespace: String,
    pub port_base: u16,
    pub control_port: u16,
    pub http_port: u16,
    /// `tcp` or `quic`.
    pub shard_transport: String,
    /// More `peerage swarm` flags, given to every shard.
    pub swarm_args: Vec<String>,
    /// Per-shard container resources (Kubernetes quantities).
    pub cpu: String,
    pub memory: String,
}

/// Why manifests cannot be generated.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("{shards} shards for {nodes} nodes: need 1 <= shards <= nodes")]
    Shards { shards: u32, nodes: u32 },
    #[error("a shard's command would be refused by peerage: {0}")]
    Command(String),
    #[error("{0} must be a DNS label (lower-case letters, digits, '-')")]
    Name(String),
    #[error("cannot write YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 50
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl DeployParams {
    fn check(&self) -> Result<(), DeployError> {
        if self.shards == 0 || self.shards > self.nodes {
            return Err(DeployError::Shards { shards: self.shards, nodes: self.nodes });
        }
        for n in [&self.name, &self.namespace] {
            if !dns_label(n) {
                return Err(DeployError::Name(n.clone()));
            }
        }
        Ok(())
    }

    /// `peerage swarm` arguments of shard `index` (a number, or a `$(VAR)` Kubernetes expands),
    /// the other shards at `hosts`, the conductor at `control`.
    pub fn shard_args(&self, index: &str, hosts: &[String], control: &str, extra: &[String]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "swarm".into(),
            "--nodes".into(),
            self.nodes.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--shard".into(),
            format!("{index}/{}", self.shards),
            "--shard-hosts".into(),
            hosts.join(","),
            "--port-base".into(),
            self.port_base.to_string(),
            "--shard-transport".into(),
            self.shard_transport.clone(),
            "--control".into(),
            control.into(),
            "--quiet".into(),
        ];
        a.extend(extra.iter().cloned());
        a.extend(self.swarm_args.iter().cloned());
        a
    }

    /// Parse `args` (with `index` put in for `var`, a `$(VAR)`; "" for none) as the binary
    /// would.
    fn parse_check(args: &[String], var: &str, index: u32) -> Result<(), DeployError> {
        let put = |a: &String| if var.is_empty() { a.clone() } else { a.replace(var, &index.to_string()) };
        let argv = std::iter::once("peerage".to_string()).chain(args.iter().map(put));
        match Cli::try_parse_from(argv) {
            Ok(Cli { command: CliCommand::Swarm(_) | CliCommand::Report(_), .. }) => Ok(()),
            Ok(_) => Err(DeployError::Command("not a swarm or report command".into())),
            Err(e) => Err(DeployError::Command(e.to_string().lines().next().unwrap_or_default().to_string())),
        }
    }
}

/// The environment variable that holds a pod's shard index.
pub const SHARD_VAR: &str = "PEERAGE_SHARD";

/// Kubernetes manifests (multi-document YAML): Service, StatefulSet, collect Job.
pub fn k8s(p: &DeployParams) -> Result<String, DeployError> {
    p.check()?;
    let (name, ns) = (&p.name, &p.namespace);
    let host = |i: u32| format!("{name}-{i}.{name}.{ns}.svc.cluster.local");
    let hosts: Vec<String> = (0..p.shards).map(host).collect();
    let control = format!("{}:{}", host(0), p.control_port);
    let extra = vec!["--http".to_string(), format!("0.0.0.0:{}", p.http_port), "--linger".to_string()];
    let args = p.shard_args(&format!("$({SHARD_VAR})"), &hosts, &control, &extra);
    DeployParams::parse_check(&args, &format!("$({SHARD_VAR})"), p.shards - 1)?;
    let labels = json!({ "app.kubernetes.io/name": name });
    let nonroot = json!({ "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532 });
    let container_sec = json!({ "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": { "drop": ["ALL"] } });
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": true,
            "selector": labels,
            "ports": [
                { "name": "control", "port": p.control_port, "protocol": "TCP" },
                { "name": "http", "port": p.http_port, "protocol": "TCP" },
            ],
        },
    });
    let statefulset = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": {
            "serviceName": name,
            "replicas": p.shards,
            "podManagementPolicy": "Parallel",
            "selector": { "matchLabels": labels },
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": p.http_port.to_string(),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": {
                    "securityContext": nonroot,
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{
                        "name": "shard",
                        "image": p.image,
                        "args": args,
                        "env": [
                            { "name": SHARD_VAR, "valueFrom": { "fieldRef": { "fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']" } } },
                            { "name": "RUST_LOG", "value": "warn" },
                        ],
                        "ports": [
                            { "name": "control", "containerPort": p.control_port },
                            { "name": "http", "containerPort": p.http_port },
                        ],
                        "readinessProbe": { "httpGet": { "path": "/healthz", "port": "http" }, "periodSeconds": 10 },
                        "resources": {
                            "requests": { "cpu": p.cpu, "memory": p.memory },
                            "limits": { "memory": p.memory },
                        },
                        "securityContext": container_sec,
                    }],
                },
            },
        },
    });
    let fetch = format!(
        "for i in $(seq 0 {last}); do until wget -q -O /parts/part-$i.json http://{name}-$i.{name}.{ns}.svc.cluster.local:{port}/part; do sleep 10; done; done",
        last = p.shards - 1,
        port = p.http_port
    );
    let merge_args =
        vec!["report".to_string(), "merge".into(), "/parts".into(), "--out".into(), "/parts/report.json".into()];
    DeployParams::parse_check(&merge_args, "", 0)?;
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": format!("{name}-collect"), "namespace": ns, "labels": labels },
        "spec": {
            "backoffLimit": 2,
            "template": {
                "spec": {
                    "restartPolicy": "OnFailure",
                    "securityContext": nonroot,
                    "initContainers": [{
                        "name": "fetch",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", fetch],
                        "volumeMounts": [{ "name": "parts", "mountPath": "/parts" }],
                        "securityContext": container_sec,
                    }],
                    "containers": [{
                        "name": "merge",
                        "image": p.image,
                        "args": merge_args,
                        "volumeMounts": [{ "name": "parts", "mountPath": "/parts" }],
                        "securityContext": container_sec,
                    }],
                    "volumes": [{ "name": "parts", "emptyDir": {} }],
                },
            },
        },
    });
    let mut out = String::from("# Generated by `peerage deploy k8s`; regenerate rather than edit.\n");
    for doc in [service, statefulset, job] {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&doc)?);
    }
    Ok(out)
}

/// A compose file: one service per shard, parts in `./out` (create it writable for uid 65532).
pub fn compose(p: &DeployParams) -> Result<String, DeployError> {
    p.check()?;
    let hosts: Vec<String> = (0..p.shards).map(|i| format!("shard-{i}")).collect();
    let control = format!("shard-0:{}", p.control_port);
    let mut services = serde_json::Map::new();
    for i in 0..p.shards {
        let extra = vec!["--out".to_string(), format!("/out/part-{i}.json")];
        let args = p.shard_args(&i.to_string(), &hosts, &control, &extra);
        DeployParams::parse_check(&args, "", i)?;
        services.insert(
            format!("shard-{i}"),
            json!({
                "image": p.image,
                "hostname": format!("shard-{i}"),
                "command": args,
                "user": "65532:65532",
                "environment": { "RUST_LOG": "warn" },
                "volumes": ["./out:/out"],
                "ulimits": { "nofile": { "soft": 65536, "hard": 65536 } },
                "read_only": true,
            }),
        );
    }
    let doc = json!({ "name": p.name, "services": Value::Object(services) });
    Ok(format!(
        "# Generated by `peerage deploy compose`; regenerate rather than edit.\n# mkdir -m 777 out && docker compose up; then: peerage report merge out/\n{}",
        serde_yaml::to_string(&doc)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn params() -> DeployParams {
        DeployParams {
            nodes: 10_000,
            shards: 20,
            seed: 7,
            image: "peerage:test".into(),
            name: "peerage".into(),
            namespace: "lab".into(),
            port_base: 20_000,
            control_port: 7070,
            http_port: 9100,
            shard_transport: "quic".into(),
            swarm_args: vec!["--latency".into(), "internet".into(), "--superpeers".into(), "prefix".into()],
            cpu: "1".into(),
            memory: "4Gi".into(),
        }
    }

    #[test]
    fn bad_parameters_are_refused_before_anything_is_written() {
        let mut p = params();
        p.shards = 0;
        assert!(matches!(k8s(&p), Err(DeployError::Shards { .. })));
        let mut p = params();
        p.swarm_args = vec!["--no-such-flag".into()];
        assert!(matches!(k8s(&p), Err(DeployError::Command(_))));
        assert!(matches!(compose(&p), Err(DeployError::Command(_))));
        let mut p = params();
        p.name = "Peerage_1".into();
        assert!(matches!(compose(&p), Err(DeployError::Name(_))));
    }
}
