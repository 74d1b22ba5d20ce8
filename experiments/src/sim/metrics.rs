//! Counters the simulator keeps while it runs: messages by type, deliveries, faults.
//!
//! [`KindCounter`] counts anything that names its kind with a `&'static str` (election
//! messages use `Message::kind()`); the super-peer experiments can reuse it for their own
//! message types. It keeps a short list of `(kind, count)` pairs in first-seen order: a run
//! uses a handful of kinds, so a linear scan beats hashing, and the order is deterministic.

use serde::Serialize;
use std::collections::BTreeMap;

/// Counts per kind name.
#[derive(Debug, Clone, Default)]
pub struct KindCounter {
    counts: Vec<(&'static str, u64)>,
}

impl KindCounter {
    /// Add one to `kind`.
    #[inline]
    pub fn add(&mut self, kind: &'static str) {
        self.add_n(kind, 1);
    }

    /// Add `n` to `kind`.
    #[inline]
    pub fn add_n(&mut self, kind: &'static str, n: u64) {
        for e in self.counts.iter_mut() {
            if std::ptr::eq(e.0, kind) || e.0 == kind {
                e.1 += n;
                return;
            }
        }
        self.counts.push((kind, n));
    }

    /// Count of one kind.
    pub fn get(&self, kind: &str) -> u64 {
        self.counts.iter().filter(|e| e.0 == kind).map(|e| e.1).sum()
    }

    /// Sum over all kinds.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|e| e.1).sum()
    }

    /// Counts sorted by kind name (for reports).
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for (k, v) in &self.counts {
            *m.entry(k.to_string()).or_insert(0) += v;
        }
        m
    }

    /// Add all of `other` into `self`.
    pub fn merge(&mut self, other: &KindCounter) {
        for &(k, v) in &other.counts {
            self.add_n(k, v);
        }
    }
}

/// Everything one run counted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Metrics {
    /// Messages handed to the network (`Effect::Send`), by `Message::kind()`.
    #[serde(serialize_with = "ser_kinds")]
    pub sent: KindCounter,
    /// Serialised bytes of the sent messages (postcard), if byte counting was on.
    pub sent_bytes: Option<u64>,
    /// Messages handed to a live, reachable receiver.
    pub delivered: u64,
    /// Messages dropped by the loss rate.
    pub lost: u64,
    /// Extra copies made by the duplication rate.
    pub duplicated: u64,
    /// Messages given extra delay by the reordering rate.
    pub reordered: u64,
    /// Messages that hit a crashed or unreachable process (reported as `SendFailed`).
    pub failed: u64,
    /// Sends to an id that is not a simulated process.
    pub unknown_destination: u64,
    /// Inputs refused by their process (`Effect::Rejected`).
    pub rejected: u64,
    /// Timers that fired (stale, cancelled or crashed timers excluded).
    pub timers_fired: u64,
    /// `Effect::ElectionStarted` count.
    pub elections_started: u64,
    /// `Effect::Leader` count.
    pub decisions: u64,
    /// `PeerDown` / `PeerUp` inputs given by the failure detector and topology changes.
    pub peer_down_reports: u64,
    pub peer_up_reports: u64,
    /// Crashes, recoveries and freezes that happened.
    pub crashes: u64,
    pub recoveries: u64,
    pub freezes: u64,
    /// Events popped from the queue.
    pub events: u64,
    /// Largest number of events queued at once.
    pub peak_queue: usize,
    /// Largest number of messages in flight at once.
    pub peak_in_flight: usize,
}

fn ser_kinds<S: serde::Serializer>(k: &KindCounter, s: S) -> Result<S::Ok, S::Error> {
    k.to_map().serialize(s)
}

impl Metrics {
    /// Total messages sent.
    pub fn messages(&self) -> u64 {
        self.sent.total()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_kind() {
        let mut k = KindCounter::default();
        k.add("Election");
        k.add("Answer");
        k.add("Election");
        let owned = String::from("Answer");
        let leaked: &'static str = Box::leak(owned.into_boxed_str());
        k.add(leaked);
        assert_eq!(k.get("Election"), 2);
        assert_eq!(k.get("Answer"), 2);
        assert_eq!(k.total(), 4);
        let mut j = KindCounter::default();
        j.add_n("Coordinator", 5);
        k.merge(&j);
        assert_eq!(k.to_map().get("Coordinator"), Some(&5));
    }
}
