//! The `[superpeer]` section of a node's TOML config and the `--superpeers` / `--sp-share` /
//! `--sp-cap` flags: whether the node runs super-peer selection (issue 4) and with which
//! settings, validated into an `overlay::superpeer::SuperPeerConfig`.
//!
//! Keys: `mode` (`off`, `prefix` or `tokens`), `share` (wanted fraction of super peers,
//! (0, 0.5]), `cluster_cap` (most members per super peer), `tick_ms` (length of one protocol
//! round; the simulator uses 1 s), `hold_rounds` (rounds a token must stay put before its
//! holder promotes itself), `cluster_algorithm` (the election a cluster runs when its super
//! peer dies; default bully), `lookup_bits` (see `node/src/superpeer/driver.rs`: how many leading bits
//! of a closest-peer lookup's target match the wanted key), `start_delay_ms` (how long after
//! start-up the node waits before its first lookups, so that its routing table has entries),
//! `suspect_after_ms` (how long a member must have heard nothing from its super peer before
//! failed probes report it down, and how long a super peer may refuse its member's dials
//! without serving it before the member leaves it; `overlay::detect::head_watch`), `probe_stall_ms` (a failed probe counts
//! nothing if the node's own loop ran later than this while it was out; 0 = no limit;
//! `overlay::detect::head_watch`, "A stalled loop judges nobody"), `gone_after_probes` (probes in a row
//! that find nothing listening at the super peer's addresses and report it down without
//! waiting for `suspect_after_ms`; 0 = off; `overlay::detect::head_watch`, "Nothing listening is down"),
//! `coord_window` and `coord_threshold_ms` (the update filter between Vivaldi and super-peer
//! selection: samples per window, 0 = off, and the energy distance that moves the application
//! coordinate; `node/src/coords/driver.rs`, "Application coordinate"), `estimate_parallel` and
//! `estimate_push_peers` (the size estimate's own lookups at a time, and the peers each
//! sample is pushed to; 0 = no sharing: `overlay::superpeer::estimate`, "Pooled samples").
//! Everything else keeps `SuperPeerConfig`'s defaults (the ones the simulator measured).
//!
//! With super peers on, `config.rs` raises `limits.target_high` to at least 48 (room for the
//! overlay's neighbours and a gossipsub mesh; the peer manager never prunes a neighbour, head
//! or member) with the inbound gate at the same line, and `limits.max_established` to at least
//! `cluster_cap + target_high + 8` (and 16 above `inbound_gate`): a super peer keeps one connection per
//! member, and an inbound refusal would look like a dead super peer to the member that dials
//! it, so a node that serves a cluster takes inbound connections up to that cap
//! (`Gate::set_serving`). Other nodes keep `inbound_gate`, below the cap their own DHT lookups
//! dial to (`node/src/net/gate.rs`).

use overlay::coords::{UpdateFilterConfig, UpdateFilterConfigError};
use overlay::superpeer::{Method, SuperPeerConfig};
use overlay::{Algorithm, ElectionConfig};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// `off`, or one of the two selection methods.
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

/// The file section (every key optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SuperPeerFileConfig {
    pub mode: String,
    pub share: f64,
    pub cluster_cap: u32,
    pub tick_ms: u64,
    pub hold_rounds: u32,
    pub cluster_algorithm: String,
    pub lookup_bits: u32,
    pub start_delay_ms: u64,
    pub suspect_after_ms: u64,
    pub probe_stall_ms: u64,
    pub gone_after_probes: u32,
    pub coord_window: usize,
    pub coord_threshold_ms: f64,
    pub estimate_parallel: u32,
    pub estimate_push_peers: u32,
}

impl Default for SuperPeerFileConfig {
    fn default() -> Self {
        let d = SuperPeerConfig::default();
        SuperPeerFileConfig {
            mode: "off".into(),
            share: d.share,
            cluster_cap: d.cluster_cap,
            tick_ms: 1000,
            hold_rounds: d.hold_rounds,
            cluster_algorithm: "bully".into(),
            lookup_bits: 16,
            start_delay_ms: 3000,
            suspect_after_ms: 10_000,
            probe_stall_ms: 1000,
            gone_after_probes: 2,
            coord_window: UpdateFilterConfig::default().window,
            coord_threshold_ms: UpdateFilterConfig::default().threshold * 1000.0,
            estimate_parallel: d.estimate_parallel,
            estimate_push_peers: d.estimate_push_peers,
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
    #[error("bad super-peer cluster algorithm: {0}")]
    Algorithm(#[from] overlay::election::UnknownAlgorithm),
    #[error("super-peer cluster algorithm echo is not supported (it needs the cluster's topology); use bully, fast-bully, ring, chang-roberts or villadangos")]
    Echo,
    #[error("bad superpeer.coord_window / coord_threshold_ms: {0}")]
    CoordFilter(#[from] UpdateFilterConfigError),
    #[error("superpeer.{field} must be in {range}, got {got}")]
    Range { field: &'static str, range: &'static str, got: u64 },
}

/// Validated settings the node runs with.
#[derive(Debug, Clone)]
pub struct SuperPeerSettings {
    pub protocol: Arc<SuperPeerConfig>,
    pub tick: Duration,
    pub lookup_bits: u32,
    pub start_delay: Duration,
    /// Silence before failed probes may report the head down (`overlay::detect::head_watch`).
    pub suspect_after: Duration,
    /// Our loop's lateness beyond which a failed probe counts nothing (`overlay::detect::head_watch`).
    pub probe_stall: Duration,
    /// Probes in a row finding no listener that report the head down at once (0: off;
    /// `overlay::detect::head_watch`).
    pub gone_after_probes: u32,
    /// The update filter that makes the coordinate super-peer selection sees
    /// (`node/src/coords/driver.rs`, "Application coordinate").
    pub coord_filter: UpdateFilterConfig,
}

impl SuperPeerFileConfig {
    /// `None` when the mode is `off`.
    pub fn resolve(&self) -> Result<Option<SuperPeerSettings>, SuperPeerSettingsError> {
        let method = match self.mode.parse::<SuperPeerMode>()? {
            SuperPeerMode::Off => return Ok(None),
            SuperPeerMode::On(m) => m,
        };
        let range = |field, got: u64, lo: u64, hi: u64, text| {
            if got >= lo && got <= hi {
                Ok(())
            } else {
                Err(SuperPeerSettingsError::Range { field, range: text, got })
            }
        };
        range("tick_ms", self.tick_ms, 50, 60_000, "[50, 60000]")?;
        range("lookup_bits", self.lookup_bits as u64, 0, 24, "[0, 24]")?;
        range("start_delay_ms", self.start_delay_ms, 0, 600_000, "[0, 600000]")?;
        range("suspect_after_ms", self.suspect_after_ms, 0, 600_000, "[0, 600000]")?;
        range("probe_stall_ms", self.probe_stall_ms, 0, 600_000, "[0, 600000]")?;
        range("gone_after_probes", self.gone_after_probes as u64, 0, 100, "[0, 100]")?;
        let coord_filter =
            UpdateFilterConfig { window: self.coord_window, threshold: self.coord_threshold_ms / 1000.0 };
        coord_filter.validate()?;
        let algorithm = self.cluster_algorithm.parse::<Algorithm>()?;
        if algorithm == Algorithm::Echo {
            return Err(SuperPeerSettingsError::Echo);
        }
        let protocol = SuperPeerConfig {
            method,
            share: self.share,
            cluster_cap: self.cluster_cap,
            hold_rounds: self.hold_rounds,
            estimate_parallel: self.estimate_parallel,
            estimate_push_peers: self.estimate_push_peers,
            election: ElectionConfig { algorithm, alive_interval_ms: 0, ..ElectionConfig::default() },
            // A member checking a head that others suspect waits as long as its own failure
            // detector would before suspecting it (`overlay::superpeer::node`, step 5, "A
            // doubter wins only once its check failed").
            doubt_rounds: (self.suspect_after_ms.div_ceil(self.tick_ms.max(1)).min(1_000_000) as u32).max(3),
            ..SuperPeerConfig::default()
        };
        protocol.validate()?;
        Ok(Some(SuperPeerSettings {
            protocol: Arc::new(protocol),
            tick: Duration::from_millis(self.tick_ms),
            lookup_bits: self.lookup_bits,
            start_delay: Duration::from_millis(self.start_delay_ms),
            suspect_after: Duration::from_millis(self.suspect_after_ms),
            probe_stall: Duration::from_millis(self.probe_stall_ms),
            gone_after_probes: self.gone_after_probes,
            coord_filter,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_errors() {
        assert!(SuperPeerFileConfig::default().resolve().unwrap().is_none());
        let c = SuperPeerFileConfig { mode: "tokens".into(), share: 0.1, cluster_cap: 20, ..Default::default() };
        let s = c.resolve().unwrap().unwrap();
        assert_eq!(s.protocol.method, Method::RepulsionTokens);
        assert_eq!(s.protocol.cluster_cap, 20);
        let c = SuperPeerFileConfig { mode: "prefix".into(), ..Default::default() };
        assert_eq!(c.resolve().unwrap().unwrap().protocol.method, Method::ReservedPrefix);
        let bad = SuperPeerFileConfig { mode: "leaders".into(), ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("leaders"));
        let bad = SuperPeerFileConfig { mode: "prefix".into(), share: 0.9, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("share"));
        let bad = SuperPeerFileConfig { mode: "prefix".into(), cluster_cap: 0, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("cluster_cap"));
        let bad = SuperPeerFileConfig { mode: "prefix".into(), tick_ms: 1, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("tick_ms"));
        let bad = SuperPeerFileConfig { mode: "tokens".into(), suspect_after_ms: 700_000, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("suspect_after_ms"));
        let t: SuperPeerFileConfig = toml::from_str("mode = \"tokens\"\nsuspect_after_ms = 4000\n").unwrap();
        assert_eq!(t.resolve().unwrap().unwrap().suspect_after, Duration::from_secs(4));
        assert_eq!(t.resolve().unwrap().unwrap().probe_stall, Duration::from_secs(1), "default");
        assert_eq!(t.resolve().unwrap().unwrap().protocol.doubt_rounds, 4, "a check waits suspect_after");
        assert_eq!(
            SuperPeerFileConfig { mode: "prefix".into(), ..Default::default() }
                .resolve()
                .unwrap()
                .unwrap()
                .protocol
                .doubt_rounds,
            10
        );
        let t: SuperPeerFileConfig = toml::from_str("mode = \"prefix\"\nprobe_stall_ms = 0\n").unwrap();
        assert_eq!(t.resolve().unwrap().unwrap().probe_stall, Duration::ZERO);
        let bad = SuperPeerFileConfig { mode: "prefix".into(), probe_stall_ms: 600_001, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("probe_stall_ms"));
        assert_eq!(t.resolve().unwrap().unwrap().gone_after_probes, 2, "default");
        let t: SuperPeerFileConfig = toml::from_str("mode = \"prefix\"\ngone_after_probes = 0\n").unwrap();
        assert_eq!(t.resolve().unwrap().unwrap().gone_after_probes, 0, "off");
        let bad = SuperPeerFileConfig { mode: "prefix".into(), gone_after_probes: 101, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("gone_after_probes"));
        let d = t.resolve().unwrap().unwrap().coord_filter;
        assert_eq!((d.window, d.threshold), (16, 0.004), "the coordinate filter's defaults");
        let t: SuperPeerFileConfig =
            toml::from_str("mode = \"tokens\"\ncoord_window = 0\ncoord_threshold_ms = 2.5\n").unwrap();
        let f = t.resolve().unwrap().unwrap().coord_filter;
        assert_eq!((f.window, f.threshold), (0, 0.0025));
        let bad = SuperPeerFileConfig { mode: "tokens".into(), coord_window: 100_000, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("coord_window"));
        let bad = SuperPeerFileConfig { mode: "tokens".into(), coord_threshold_ms: f64::NAN, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("coord_threshold_ms"));
        let bad = SuperPeerFileConfig { mode: "prefix".into(), cluster_algorithm: "echo".into(), ..Default::default() };
        assert!(bad.resolve().is_err());
        let t: SuperPeerFileConfig = toml::from_str("mode = \"tokens\"\nshare = 0.05\ncluster_cap = 40\n").unwrap();
        assert_eq!(t.resolve().unwrap().unwrap().protocol.share, 0.05);
        assert!(toml::from_str::<SuperPeerFileConfig>("mod = \"tokens\"").is_err());
        // The size estimate's settings : passed on, and checked.
        let t: SuperPeerFileConfig =
            toml::from_str("mode = \"prefix\"\nestimate_parallel = 8\nestimate_push_peers = 0\n").unwrap();
        let p = t.resolve().unwrap().unwrap().protocol;
        assert_eq!((p.estimate_parallel, p.estimate_push_peers), (8, 0));
        let bad = SuperPeerFileConfig { mode: "prefix".into(), estimate_parallel: 0, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("estimate_parallel"));
        let bad = SuperPeerFileConfig { mode: "tokens".into(), estimate_push_peers: 65, ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("estimate_push_peers"));
    }
}
