use overlay::election::Algorithm;
use overlay::Time;
use peerage_experiments::lab::cases::random_case;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let alg: Algorithm = args[1].parse().unwrap();
    let seed: u64 = args[2].parse().unwrap();
    let times: Vec<u64> = args[3..].iter().map(|s| s.parse().unwrap()).collect();
    let c = random_case(alg, seed, None);
    let s = &c.scenario;
    // same window as run(): dry run
    let (mut dry, _, last) = s.build(seed, None).unwrap();
    s.run_to_end(&mut dry, last);
    let t = peerage_experiments::lab::scenario::agreement_time(&dry).unwrap_or(dry.now());
    let w = std::time::Duration::from_micros(t.as_micros().max(1_000));
    let (mut sim, _, _) = s.build(seed, Some(w)).unwrap();
    for ms in times {
        sim.run_until(Time::from_millis(ms), u64::MAX);
        println!("=== t={ms}ms");
        for i in 0..sim.len() as u32 {
            match sim.process(i) {
                Some(p) => println!("{i} {:?}", p),
                None => println!("{i} dead"),
            }
        }
    }
}
