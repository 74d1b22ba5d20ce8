use overlay::election::Algorithm;
use overlay::Time;
use peerage_experiments::lab::scenario::Scenario;
use peerage_experiments::lab::spec::Initiators;
use peerage_experiments::sim::latency::LatencySpec;
use std::time::Duration;
fn main() {
    for lat in [
        LatencySpec::Constant(Duration::from_millis(5)),
        LatencySpec::Range(Duration::from_millis(1), Duration::from_millis(30)),
    ] {
        for seed in 0..8 {
            let s = Scenario {
                algorithm: Algorithm::Echo,
                nodes: 16,
                initiators: Initiators::Count(1),
                latency: lat.clone(),
                ..Scenario::default()
            };
            let (mut sim, _, _) = s.build(seed, None).unwrap();
            let e: usize = (0..16u32).map(|i| sim.topology().unwrap().neighbours(i).len()).sum::<usize>() / 2;
            sim.run_until(Time::from_millis(1_000_000), u64::MAX);
            let m = sim.metrics();
            println!(
                "{lat} seed {seed}: total {} formula {} extra {} (elections started {})",
                m.messages(),
                4 * e + 15,
                m.messages() as i64 - (4 * e + 15) as i64,
                m.elections_started
            );
        }
    }
}
