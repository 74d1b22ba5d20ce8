//! `peerage-lab sweep`: the long randomised safety/liveness check under every fault kind.
//!
//! For every algorithm and seed it runs the random case of that seed ([`random_case`]: one
//! fault kind, drawn from the seed unless `--kind` fixes it) and judges it with the oracle.
//! A case inside the algorithm's assumptions that violates safety or liveness is a bug: it is
//! printed with the command that replays it, and the exit status is 1. A case outside them is
//! counted as degradation. The table gives, per algorithm and fault kind, the cases, the
//! violations inside, the degraded cases outside, and how long the inside cases took to
//! settle after their last fault (median and largest). `--out FILE` writes one CSV row per
//! case, from which the table can be recomputed.

use crate::lab::cases::{random_case, FaultKind};
use crate::lab::cli::SweepArgs;
use crate::lab::scenario::Outcome;
use anyhow::Context as _;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use overlay::election::Algorithm;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One judged case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub algorithm: Algorithm,
    pub seed: u64,
    pub kind: FaultKind,
    pub inside: bool,
    pub ok: bool,
    /// Why it failed (empty when `ok`).
    pub summary: String,
    pub outcome: Option<Outcome>,
}

/// A case inside its algorithm's assumptions that violated safety or liveness.
#[derive(Debug, Clone)]
pub struct Failure {
    pub algorithm: Algorithm,
    pub seed: u64,
    pub kind: FaultKind,
    pub summary: String,
}

/// Run the case of `seed` (of `kind` if given) and judge it.
pub fn run_case(algorithm: Algorithm, seed: u64, kind: Option<FaultKind>) -> CaseResult {
    let case = random_case(algorithm, seed, kind);
    let scn = &case.scenario;
    let (ok, summary, outcome) = match scn.run(seed, false) {
        Ok(o) if o.ok() => (true, String::new(), Some(o)),
        Ok(o) => {
            let summary = format!(
                "{} N={} down-at-start={} crash-during={} recover={} latency={} detect={}ms loss={:.3} dup={:.3} reorder={:.3} partition={:?} freeze={:?} heartbeats={}ms initiators={}: safety {} agreement {} liveness {} ({} live, {} undecided, {} wrong, {} in an election, end {:?}); {}",
                case.kind,
                scn.nodes,
                o.down_at_start,
                o.crashed_during,
                scn.recover,
                scn.latency,
                scn.detect_delay_ms,
                scn.loss,
                scn.dup,
                scn.reorder,
                scn.partition,
                scn.freeze,
                scn.alive_interval_ms,
                scn.initiators,
                o.verdict.safety,
                o.verdict.agreement,
                o.verdict.liveness,
                o.verdict.live,
                o.verdict.undecided,
                o.verdict.wrong,
                o.verdict.still_in_election,
                o.end,
                o.verdict.problems.join("; ")
            );
            (false, summary, Some(o))
        }
        Err(e) => (false, format!("could not run: {e}"), None),
    };
    CaseResult { algorithm, seed, kind: case.kind, inside: case.inside, ok, summary, outcome }
}

/// The case of `seed` as the tests run it: an error only for a violation inside the
/// algorithm's assumptions.
pub fn check_seed(algorithm: Algorithm, seed: u64) -> Result<(), Failure> {
    let r = run_case(algorithm, seed, None);
    if r.inside && !r.ok {
        Err(Failure { algorithm, seed, kind: r.kind, summary: r.summary })
    } else {
        Ok(())
    }
}

/// The command that replays one case.
pub fn replay_command(algorithm: Algorithm, seed: u64, kind: Option<FaultKind>) -> String {
    let k = kind.map_or(String::new(), |k| format!(" --kind {k}"));
    format!("peerage-lab sweep --algorithm {algorithm} --seeds {seed}{k} --details")
}

/// Counts of one (algorithm, kind) cell.
#[derive(Debug, Clone, Default)]
struct Cell {
    cases: u64,
    inside: u64,
    violations: u64,
    degraded: u64,
    /// Settle times (ms) of the inside cases that held.
    settle_ms: Vec<u32>,
}

impl Cell {
    fn add(&mut self, r: &CaseResult) {
        self.cases += 1;
        if r.inside {
            self.inside += 1;
            if r.ok {
                let s = r.outcome.as_ref().and_then(|o| o.settle_us).unwrap_or(0);
                self.settle_ms.push((s / 1_000).min(u32::MAX as u64) as u32);
            } else {
                self.violations += 1;
            }
        } else if !r.ok {
            self.degraded += 1;
        }
    }
    fn merge(&mut self, o: Cell) {
        self.cases += o.cases;
        self.inside += o.inside;
        self.violations += o.violations;
        self.degraded += o.degraded;
        self.settle_ms.extend(o.settle_ms);
    }
}

type Cells = BTreeMap<(Algorithm, FaultKind), Cell>;

const CSV_HEADER: [&str; 14] = [
    "algorithm",
    "seed",
    "kind",
    "inside",
    "ok",
    "safety",
    "agreement",
    "liveness",
    "nodes",
    "live",
    "messages",
    "last_fault_ms",
    "settle_ms",
    "end",
];

fn csv_row(r: &CaseResult) -> Vec<String> {
    let o = r.outcome.as_ref();
    let v = |f: &dyn Fn(&Outcome) -> String| o.map_or(String::new(), f);
    vec![
        r.algorithm.to_string(),
        r.seed.to_string(),
        r.kind.to_string(),
        r.inside.to_string(),
        r.ok.to_string(),
        v(&|o| o.verdict.safety.to_string()),
        v(&|o| o.verdict.agreement.to_string()),
        v(&|o| o.verdict.liveness.to_string()),
        v(&|o| o.nodes.to_string()),
        v(&|o| o.verdict.live.to_string()),
        v(&|o| o.messages.to_string()),
        v(&|o| format!("{:.3}", o.last_fault_us as f64 / 1e3)),
        v(&|o| o.settle_us.map_or(String::new(), |s| format!("{:.3}", s as f64 / 1e3))),
        v(&|o| format!("{:?}", o.end)),
    ]
}

pub fn run(args: SweepArgs) -> anyhow::Result<ExitCode> {
    let jobs = args.jobs.clamp(1, 64);
    let writer = match &args.out {
        Some(p) => {
            let mut w = csv::Writer::from_path(p).with_context(|| format!("writing {}", p.display()))?;
            w.write_record(CSV_HEADER)?;
            Some(Mutex::new(w))
        }
        None => None,
    };
    let failures = Mutex::new(Vec::<Failure>::new());
    let cells = Mutex::new(Cells::new());
    let done = AtomicU64::new(0);
    let total = args.seeds.len() * args.algorithm.0.len() as u64;
    let started = std::time::Instant::now();
    std::thread::scope(|sc| {
        for j in 0..jobs {
            let (failures, cells, done, writer) = (&failures, &cells, &done, &writer);
            let (algs, seeds, kind, details) = (&args.algorithm.0, args.seeds, args.kind, args.details);
            sc.spawn(move || {
                let mut mine = Cells::new();
                for seed in seeds.iter().skip(j).step_by(jobs) {
                    for &a in algs {
                        let r = run_case(a, seed, kind);
                        mine.entry((a, r.kind)).or_default().add(&r);
                        if let Some(w) = writer {
                            if let Ok(mut w) = w.lock() {
                                // A write error shows at the final flush.
                                let _ = w.write_record(csv_row(&r));
                            }
                        }
                        if !r.ok && (r.inside || details) {
                            let what = if r.inside { "FAIL" } else { "degraded (outside the assumptions)" };
                            eprintln!(
                                "{what} {a} seed {seed}: {}\n  replay: {}",
                                r.summary,
                                replay_command(a, seed, kind)
                            );
                        }
                        if r.inside && !r.ok {
                            if let Ok(mut v) = failures.lock() {
                                v.push(Failure { algorithm: a, seed, kind: r.kind, summary: r.summary });
                            }
                        }
                        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if d % 100_000 == 0 {
                            eprintln!("{d}/{total} cases, {:.0} s", started.elapsed().as_secs_f64());
                        }
                    }
                }
                if let Ok(mut c) = cells.lock() {
                    for (k, v) in mine {
                        c.entry(k).or_default().merge(v);
                    }
                }
            });
        }
    });
    if let Some(w) = writer {
        let mut w = w.into_inner().map_err(|_| anyhow::anyhow!("CSV writer poisoned"))?;
        w.flush().context("writing the case rows")?;
    }
    let cells = cells.into_inner().unwrap_or_default();
    let mut failures = failures.into_inner().unwrap_or_default();
    failures.sort_by_key(|f| (f.algorithm, f.seed));
    if args.markdown {
        print_markdown(&cells);
    } else {
        print_table(&cells);
    }
    for a in &args.algorithm.0 {
        let bad: Vec<u64> = failures.iter().filter(|f| f.algorithm == *a).map(|f| f.seed).collect();
        if !bad.is_empty() {
            println!(
                "{a}: {} violations inside the assumptions (first seeds {:?})",
                bad.len(),
                &bad[..bad.len().min(10)]
            );
        }
    }
    println!("{} cases (seeds {}) in {:.1} s", total, args.seeds, started.elapsed().as_secs_f64());
    Ok(if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Median and largest of `v` (sorted in place).
fn median_max(v: &mut [u32]) -> (Option<u32>, Option<u32>) {
    v.sort_unstable();
    (v.get(v.len() / 2).copied(), v.last().copied())
}

fn rows(cells: &Cells) -> Vec<[String; 9]> {
    let mut out = Vec::new();
    for (&(a, k), c) in cells {
        let mut s = c.settle_ms.clone();
        let (med, max) = median_max(&mut s);
        let ms = |x: Option<u32>| x.map_or("-".into(), |x| x.to_string());
        out.push([
            a.to_string(),
            k.to_string(),
            c.cases.to_string(),
            c.inside.to_string(),
            c.violations.to_string(),
            (c.cases - c.inside).to_string(),
            c.degraded.to_string(),
            ms(med),
            ms(max),
        ]);
    }
    out
}

const HEADER: [&str; 9] = [
    "algorithm",
    "fault kind",
    "cases",
    "inside",
    "violations inside",
    "outside",
    "degraded outside",
    "settle ms median",
    "settle ms max",
];

fn print_table(cells: &Cells) {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(HEADER.to_vec());
    for r in rows(cells) {
        t.add_row(r.to_vec());
    }
    println!("{t}");
}

fn print_markdown(cells: &Cells) {
    println!("| {} |", HEADER.join(" | "));
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows(cells) {
        println!("| {} |", r.join(" | "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(inside: bool, ok: bool) -> CaseResult {
        CaseResult {
            algorithm: Algorithm::Bully,
            seed: 7,
            kind: FaultKind::Loss,
            inside,
            ok,
            summary: String::new(),
            outcome: None,
        }
    }

    /// A failed case outside the assumptions counts as degraded, one inside as a violation;
    /// cases that held count in neither.
    #[test]
    fn outside_failures_are_degradation_inside_ones_violations() {
        let mut c = Cell::default();
        for (inside, ok) in [(false, false), (false, true), (true, false), (true, true), (false, false)] {
            c.add(&result(inside, ok));
        }
        assert_eq!((c.cases, c.inside, c.violations, c.degraded), (5, 2, 1, 2));
        let mut cells = Cells::new();
        cells.insert((Algorithm::Bully, FaultKind::Loss), c);
        assert_eq!(rows(&cells)[0][2..7], ["5", "2", "1", "3", "2"].map(String::from));
    }
}
