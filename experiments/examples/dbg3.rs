use overlay::election::Algorithm;
use overlay::Time;
use peerage_experiments::lab::scenario::{FreezeSpec, Scenario};
use peerage_experiments::lab::spec::Initiators;
use peerage_experiments::sim::latency::LatencySpec;
use std::time::Duration;
fn main() {
    let s = Scenario {
        algorithm: Algorithm::Villadangos,
        nodes: 12,
        initiators: Initiators::All,
        latency: LatencySpec::Range(Duration::from_millis(1), Duration::from_millis(10)),
        alive_interval_ms: 100,
        freeze: Some(FreezeSpec { at_ms: 2_000, for_ms: 5_000, leader: true }),
        ..Scenario::default()
    };
    let (mut sim, _, _) = s.build(7, Some(Duration::from_millis(1))).unwrap();
    for t in [2500u64, 3000, 4000, 6500] {
        sim.run_until(Time::from_millis(t), u64::MAX);
        println!("== {t}");
        for i in 0..12u32 {
            println!("{i} {:?}", sim.process(i));
        }
    }
}
