//! Process CPU time and resident memory, read from `/proc/self` (Linux).
//!
//! Used by `peerage swarm` to report steady-state CPU (% of one core over a window) and RSS.
//! On other systems the readers return `None` and the report says so.

use std::time::Instant;

/// User + system CPU seconds used by this process so far.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime 15 (1-based).
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let hz = 100.0; // USER_HZ is 100 on Linux.
    Some((utime + stime) / hz)
}

/// Resident set size in bytes.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU use over a window, as a percentage of one core.
pub struct CpuWindow {
    start: Instant,
    cpu0: Option<f64>,
}

impl CpuWindow {
    pub fn start() -> Self {
        CpuWindow { start: Instant::now(), cpu0: cpu_seconds() }
    }
    pub fn percent_of_one_core(&self) -> Option<f64> {
        let wall = self.start.elapsed().as_secs_f64();
        let used = cpu_seconds()? - self.cpu0?;
        (wall > 0.0).then(|| 100.0 * used / wall)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_proc() {
        if cfg!(target_os = "linux") {
            assert!(super::cpu_seconds().is_some());
            assert!(super::rss_bytes().unwrap() > 0);
        }
    }
}
