//! Where the memory of a `superpeers` run goes: the process's resident set and jemalloc's own
//! counters, sampled at phase boundaries and during the protocol rounds, and a purge that
//! hands freed pages back to the OS between phases (the 10^6 run's peak RSS).
//!
//! `peerage-lab` runs on jemalloc (its `main.rs` sets `tikv_jemallocator::Jemalloc` as the
//! global allocator). The counters are jemalloc's: `allocated` is what live
//! allocations hold, `resident` what jemalloc keeps in RAM (live data, its metadata and freed
//! but not yet purged pages). A library user on another allocator (the tests) sees jemalloc's
//! counters near zero and the purge does nothing; the RSS is the process's in any case.
//!
//! Why a purge (*ours*): jemalloc gives freed pages back after `dirty_decay_ms` (10 s), but
//! only when the arena that holds them is used again; the Vivaldi phase's worker threads
//! end, so their arenas would keep the freed coordinate clients resident through the
//! protocol phase (as glibc's arenas would without `malloc_trim`).

use serde::Serialize;
use std::time::Instant;

/// One sample of the process's memory.
#[derive(Clone, Debug, Serialize)]
pub struct MemSample {
    pub phase: String,
    /// Seconds since the population size's run started.
    pub secs: f64,
    /// The process's resident set (`VmRSS`), MiB.
    pub rss_mib: f64,
    /// The process's peak resident set so far (`VmHWM`), MiB.
    pub peak_rss_mib: f64,
    /// Bytes in live allocations (jemalloc `stats.allocated`), MiB.
    pub allocated_mib: f64,
    /// Bytes jemalloc keeps resident (`stats.resident`), MiB.
    pub resident_mib: f64,
}

/// Samples memory with phase names; shared by the run's threads through `&self`.
pub struct MemLog {
    t0: Instant,
    samples: std::sync::Mutex<Vec<MemSample>>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn status_kib(field: &str) -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl MemLog {
    pub fn new() -> MemLog {
        MemLog { t0: Instant::now(), samples: std::sync::Mutex::new(Vec::new()) }
    }

    /// Takes a sample now, tagged `phase`, and logs it at `debug`.
    pub fn sample(&self, phase: &str) {
        // jemalloc's counters are refreshed when the epoch advances.
        let _ = tikv_jemalloc_ctl::epoch::advance();
        let allocated = tikv_jemalloc_ctl::stats::allocated::read().unwrap_or(0) as f64 / MIB;
        let resident = tikv_jemalloc_ctl::stats::resident::read().unwrap_or(0) as f64 / MIB;
        let s = MemSample {
            phase: phase.to_string(),
            secs: self.t0.elapsed().as_secs_f64(),
            rss_mib: status_kib("VmRSS:").map_or(f64::NAN, |k| k / 1024.0),
            peak_rss_mib: status_kib("VmHWM:").map_or(f64::NAN, |k| k / 1024.0),
            allocated_mib: allocated,
            resident_mib: resident,
        };
        tracing::debug!(
            "memory at {}: RSS {:.0} MiB (peak {:.0}), jemalloc allocated {:.0} MiB, resident {:.0} MiB",
            s.phase,
            s.rss_mib,
            s.peak_rss_mib,
            s.allocated_mib,
            s.resident_mib
        );
        if let Ok(mut v) = self.samples.lock() {
            v.push(s);
        }
    }

    /// The samples so far, in the order taken.
    pub fn samples(&self) -> Vec<MemSample> {
        self.samples.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Default for MemLog {
    fn default() -> Self {
        MemLog::new()
    }
}

/// The process's peak resident set so far, MiB.
pub fn peak_rss_mib() -> Option<f64> {
    status_kib("VmHWM:").map(|k| k / 1024.0)
}

/// Hands the pages of freed memory in every jemalloc arena back to the OS
/// (`arena.<MALLCTL_ARENAS_ALL>.purge`). Errors are ignored: it only frees memory.
pub fn purge() {
    // MALLCTL_ARENAS_ALL is 4096 in jemalloc 5.
    let name = b"arena.4096.purge\0";
    // SAFETY: `name` is NUL-terminated; this control reads and writes nothing (all null).
    unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}
