//! A swarm process's HTTP face (`peerage swarm --http host:port`): `/metrics` for Prometheus
//! (gauges over the nodes this process runs, refreshed every [`OBSERVE_EVERY`]) and `/part`,
//! this process's report part once written (`503` before). On a cluster the collector fetches
//! every shard's `/part` and merges them (`deploy/`); with `--linger` a finished shard keeps
//! serving until it is stopped, so its pod is not restarted and its part stays readable.

use crate::runtime::status::Probe;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the gauges are refreshed.
pub const OBSERVE_EVERY: Duration = Duration::from_secs(2);

#[derive(Default, Clone)]
struct Gauges {
    alive: Gauge<i64, AtomicI64>,
    connections: Gauge<i64, AtomicI64>,
    heads: Gauge<i64, AtomicI64>,
    attached: Gauge<i64, AtomicI64>,
    members_min: Gauge<i64, AtomicI64>,
}

/// The HTTP server of one swarm process.
pub struct SwarmHttp {
    part: Arc<Mutex<Option<String>>>,
    gauges: Gauges,
    pub bound: SocketAddr,
}

fn respond(req: tiny_http::Request, body: String, status: u16, kind: &str) {
    let mut r = tiny_http::Response::from_string(body).with_status_code(status);
    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], kind.as_bytes()) {
        r = r.with_header(h);
    }
    let _ = req.respond(r);
}

impl std::fmt::Debug for SwarmHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwarmHttp").field("bound", &self.bound).finish()
    }
}

impl SwarmHttp {
    pub fn serve(addr: SocketAddr, shard: usize) -> anyhow::Result<Arc<SwarmHttp>> {
        let server = tiny_http::Server::http(addr).map_err(|e| anyhow::anyhow!("cannot serve HTTP on {addr}: {e}"))?;
        let bound = server.server_addr().to_ip().unwrap_or(addr);
        let gauges = Gauges::default();
        let mut registry = Registry::with_prefix_and_labels(
            "peerage_shard",
            [(std::borrow::Cow::Borrowed("shard"), std::borrow::Cow::Owned(shard.to_string()))].into_iter(),
        );
        registry.register("nodes_alive", "Nodes this process runs that are alive", gauges.alive.clone());
        registry.register("connections", "Connections of this process's nodes, summed", gauges.connections.clone());
        registry.register("heads", "Super peers and token holders among this process's nodes", gauges.heads.clone());
        registry.register("attached", "Nodes of this process attached to a head", gauges.attached.clone());
        registry.register("members_min", "Fewest members any node of this process knows", gauges.members_min.clone());
        let part: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let p = part.clone();
        std::thread::Builder::new().name("swarm-http".into()).spawn(move || {
            for req in server.incoming_requests() {
                match req.url() {
                    "/metrics" => {
                        let mut body = String::new();
                        match prometheus_client::encoding::text::encode(&mut body, &registry) {
                            Ok(()) => {
                                respond(req, body, 200, "application/openmetrics-text; version=1.0.0; charset=utf-8")
                            }
                            Err(e) => respond(req, format!("encoding error: {e}"), 500, "text/plain"),
                        }
                    }
                    "/part" => match p.lock().unwrap_or_else(|e| e.into_inner()).clone() {
                        Some(json) => respond(req, json, 200, "application/json"),
                        None => respond(req, "the run is not over\n".into(), 503, "text/plain"),
                    },
                    "/healthz" => respond(req, "ok\n".into(), 200, "text/plain"),
                    _ => respond(req, "not found\n".into(), 404, "text/plain"),
                }
            }
        })?;
        Ok(Arc::new(SwarmHttp { part, gauges, bound }))
    }

    /// Refresh the gauges from `probes` every [`OBSERVE_EVERY`] until the task is aborted.
    pub fn observe(self: &Arc<Self>, probes: Vec<Arc<Probe>>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let snaps: Vec<_> = probes.iter().map(|p| p.get()).filter(|s| s.fatal.is_none()).collect();
                let g = &me.gauges;
                g.alive.set(snaps.len() as i64);
                g.connections.set(snaps.iter().map(|s| s.connections as i64).sum());
                let sp = || snaps.iter().filter_map(|s| s.superpeer.as_ref());
                g.heads.set(sp().filter(|p| p.role == "super-peer" || p.role == "head").count() as i64);
                g.attached.set(sp().filter(|p| p.head.is_some()).count() as i64);
                g.members_min.set(snaps.iter().map(|s| s.members as i64).min().unwrap_or(0));
                tokio::time::sleep(OBSERVE_EVERY).await;
            }
        })
    }

    /// Serve this JSON at `/part` from now on.
    pub fn set_part(&self, json: String) {
        *self.part.lock().unwrap_or_else(|e| e.into_inner()) = Some(json);
    }
}
