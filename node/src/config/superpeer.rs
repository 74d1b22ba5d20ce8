//! Whether and how a node runs super-peer selection: the `[superpeer]` table of its TOML file
//! (and the `--superpeers` / `--sp-share` / `--sp-cap` flags), which is
//! `overlay::superpeer::SuperPeerConfig` itself, the table `peerage-lab superpeers --sp-config`
//! reads. A node with the table runs super peers; without it, it does not. Besides the table,
//! the node has one setting of its own: `timing.superpeer_start_ms`, how long after start-up it
//! waits before its first lookups, so that its routing table has entries.
//!
//! With super peers on, `config.rs` raises `limits.target_high` to at least 48 (room for the
//! overlay's neighbours and a gossipsub mesh; the peer manager never prunes a neighbour, head
//! or member) with the inbound gate at the same line, and `limits.max_established` to at least
//! `cluster_cap + target_high + 8` (and 16 above `inbound_gate`): a super peer keeps one
//! connection per member, and an inbound refusal would look like a dead super peer to the
//! member that dials it, so a node that serves a cluster takes inbound connections up to that
//! cap (`Gate::set_serving`). Other nodes keep `inbound_gate`, below the cap their own DHT
//! lookups dial to (`overlay/src/connections/admission.rs`).

use overlay::superpeer::{Method, SuperPeerConfig};
use std::sync::Arc;
use std::time::Duration;

/// `off`, or one of the two selection methods (the `--superpeers` flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuperPeerMode {
    Off,
    On(Method),
}

impl std::str::FromStr for SuperPeerMode {
    type Err = SuperPeerSettingsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" | "" => Ok(SuperPeerMode::Off),
            other => {
                other.parse::<Method>().map(SuperPeerMode::On).map_err(|_| SuperPeerSettingsError::Mode(s.to_string()))
            }
        }
    }
}

/// Bad super-peer settings.
#[derive(Debug, thiserror::Error)]
pub enum SuperPeerSettingsError {
    #[error("unknown super-peer mode {0:?}: expected off, prefix or tokens")]
    Mode(String),
    #[error("bad super-peer settings: {0}")]
    Protocol(#[from] overlay::superpeer::SuperPeerConfigError),
    #[error("timing.superpeer_start_ms must be at most 600000, got {0}")]
    StartDelay(u64),
}

/// Most a node may wait before its first super-peer lookups.
const MAX_START_MS: u64 = 600_000;

/// Validated settings the node runs with.
#[derive(Debug, Clone)]
pub struct SuperPeerSettings {
    pub protocol: Arc<SuperPeerConfig>,
    /// Wait after start-up before the first lookups (`timing.superpeer_start_ms`).
    pub start_delay: Duration,
}

/// The settings of a node whose file has a `[superpeer]` table (`None` without one).
pub fn resolve(
    table: Option<&SuperPeerConfig>,
    start_ms: u64,
) -> Result<Option<SuperPeerSettings>, SuperPeerSettingsError> {
    let Some(protocol) = table else { return Ok(None) };
    protocol.validate()?;
    if start_ms > MAX_START_MS {
        return Err(SuperPeerSettingsError::StartDelay(start_ms));
    }
    Ok(Some(SuperPeerSettings { protocol: Arc::new(protocol.clone()), start_delay: Duration::from_millis(start_ms) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use overlay::Algorithm;

    fn table(text: &str) -> Result<SuperPeerConfig, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn modes_and_errors() {
        assert!(resolve(None, 3000).unwrap().is_none(), "no table, no super peers");
        assert_eq!("prefix".parse::<SuperPeerMode>().unwrap(), SuperPeerMode::On(Method::ReservedPrefix));
        assert_eq!("off".parse::<SuperPeerMode>().unwrap(), SuperPeerMode::Off);
        assert!("leaders".parse::<SuperPeerMode>().unwrap_err().to_string().contains("leaders"));
        let c = SuperPeerConfig { share: 0.1, cluster_cap: 20, ..Default::default() };
        let s = resolve(Some(&c), 3000).unwrap().unwrap();
        assert_eq!(s.protocol.method, Method::RepulsionTokens);
        assert_eq!(s.protocol.cluster_cap, 20);
        assert_eq!(s.start_delay, Duration::from_secs(3));
        let bad = SuperPeerConfig { share: 0.9, ..Default::default() };
        assert!(resolve(Some(&bad), 0).unwrap_err().to_string().contains("share"));
        let bad = SuperPeerConfig { cluster_cap: 0, ..Default::default() };
        assert!(resolve(Some(&bad), 0).unwrap_err().to_string().contains("cluster_cap"));
        assert!(resolve(Some(&SuperPeerConfig::default()), 600_001)
            .unwrap_err()
            .to_string()
            .contains("superpeer_start_ms"));
        let t = table("method = \"prefix\"\n[head_watch]\nsuspect_after_ms = 4000\n").unwrap();
        let s = resolve(Some(&t), 0).unwrap().unwrap();
        assert_eq!(s.protocol.method, Method::ReservedPrefix);
        assert_eq!(s.protocol.head_watch.suspect_after(), Duration::from_secs(4));
        assert_eq!(s.protocol.doubt_rounds(), 4, "a check waits suspect_after");
        let bad = table("[head_watch]\nsuspect_after_ms = 700000\n").unwrap();
        assert!(resolve(Some(&bad), 0).unwrap_err().to_string().contains("suspect_after_ms"));
        let bad = table("[election]\nalgorithm = \"echo\"\n").unwrap();
        assert!(resolve(Some(&bad), 0).unwrap_err().to_string().contains("echo"));
        let t = table("[election]\nalgorithm = \"ring\"\n").unwrap();
        assert_eq!(t.election.algorithm, Algorithm::Ring);
        assert!(table("[election]\nalgorithm = \"paxos\"\n").is_err(), "an enum, not a string");
        assert!(table("mod = \"tokens\"").is_err(), "unknown keys are refused");
        assert!(table("[tokens]\nhold = 3\n").is_err(), "unknown keys of a section are refused");
        let t = table("share = 0.05\ncluster_cap = 40\n[estimate]\nsamples = 4\n").unwrap();
        let p = resolve(Some(&t), 0).unwrap().unwrap().protocol;
        assert_eq!((p.share, p.cluster_cap, p.estimate.samples), (0.05, 40, 4));
        let bad = table("[estimate]\nsamples = 0\n").unwrap();
        assert!(resolve(Some(&bad), 0).unwrap_err().to_string().contains("estimate.samples"));
    }
}
