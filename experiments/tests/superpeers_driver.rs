//! The super-peer simulator's own machinery: the id index and the DHT oracle against brute
//! force, and `--jobs` (methods and random draws on threads, yardsticks on a second thread)
//! giving byte-for-byte the output of running everything in turn. Randomised tests
//! print their seed; replay with `PEERAGE_SEED=<seed>`.

use clap::Parser;
use overlay::NodeId;
use peerage_experiments::superpeers::world::{Dht, IdIndex};
use peerage_experiments::superpeers::{run, SuperpeersArgs};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

fn seed() -> u64 {
    let s = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {s} (replay with PEERAGE_SEED={s})");
    s
}

fn random_id(rng: &mut impl RngCore) -> NodeId {
    let mut b = [0u8; 32];
    rng.fill_bytes(&mut b);
    NodeId(b)
}

#[test]
fn id_index_finds_every_id_and_only_those() {
    let s = seed();
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let ids: Vec<NodeId> = (0..20_000).map(|_| random_id(&mut rng)).collect();
    let mut index = IdIndex::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        assert!(index.insert(id, i as u32), "fresh id {i} refused");
    }
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(index.get(id), Some(i as u32), "id {i}");
    }
    // The same first 64 bits again is refused and leaves the entry alone.
    let mut twin = ids[7];
    twin.0[31] ^= 1;
    assert!(!index.insert(&twin, 99));
    assert_eq!(index.get(&ids[7]), Some(7));
    for _ in 0..20_000 {
        assert_eq!(index.get(&random_id(&mut rng)), None);
    }
}

fn top128(id: &NodeId) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&id.0[..16]);
    u128::from_be_bytes(b)
}

/// Query `q`'s key: random for even `q`, else next to a node (the worst case for the block
/// search).
fn query_key(ids: &[NodeId], q: usize, rng: &mut ChaCha8Rng) -> NodeId {
    if q % 2 == 0 {
        random_id(rng)
    } else {
        let mut id = ids[rng.gen_range(0..ids.len())];
        id.0[15] ^= 1 << rng.gen_range(0..8);
        id
    }
}

/// The `k` ids XOR-closest to `key` among those `live` says are there, by brute force.
fn brute_closest(ids: &[NodeId], live: impl Fn(usize) -> bool, key: &NodeId, k: usize) -> Vec<u32> {
    let x = top128(key);
    let mut all: Vec<(u128, u32)> =
        ids.iter().enumerate().filter(|(i, _)| live(*i)).map(|(i, id)| (top128(id) ^ x, i as u32)).collect();
    all.sort_unstable();
    all.iter().take(k).map(|p| p.1).collect()
}

#[test]
fn dht_closest_matches_brute_force() {
    let s = seed();
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    for &(n, k) in &[(1usize, 20usize), (19, 20), (20, 20), (500, 20), (5_000, 20), (5_000, 1)] {
        let ids: Vec<NodeId> = (0..n).map(|_| random_id(&mut rng)).collect();
        let dht = Dht::new(&ids, k);
        for q in 0..200 {
            let key = query_key(&ids, q, &mut rng);
            assert_eq!(dht.closest(&key), brute_closest(&ids, |_| true, &key, k), "n {n} k {k} query {q}");
        }
    }
}

/// After crashes remove nodes from the index (which also moves its bucket starts), every
/// answer is still the brute-force one over the live nodes.
#[test]
fn dht_closest_after_removals_matches_brute_force() {
    let s = seed();
    let mut rng = ChaCha8Rng::seed_from_u64(s ^ 0xdead);
    for &(n, k) in &[(40usize, 20usize), (3_000, 20), (3_000, 3)] {
        let ids: Vec<NodeId> = (0..n).map(|_| random_id(&mut rng)).collect();
        let mut dht = Dht::new(&ids, k);
        let mut live: Vec<bool> = vec![true; n];
        for i in 0..n {
            if rng.gen_bool(0.4) {
                dht.remove(&ids[i], i as u32);
                live[i] = false;
            }
        }
        for q in 0..200 {
            let key = query_key(&ids, q, &mut rng);
            let want = brute_closest(&ids, |i| live[i], &key, k);
            assert_eq!(dht.closest(&key), want, "seed {s} n {n} k {k} query {q}");
        }
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: SuperpeersArgs,
}

fn run_to(dir: &std::path::Path, jobs: &str, seed: u64) -> String {
    let seed = seed.to_string();
    let out = dir.to_str().expect("utf-8 path");
    let cli = Cli::parse_from([
        "superpeers",
        "--nodes",
        "300",
        "--seeds",
        &seed,
        "--random-draws",
        "10",
        "--vivaldi-rounds",
        "40",
        "--max-rounds",
        "40",
        "--recovery-rounds",
        "20",
        "--share",
        "0.03",
        "--no-plots",
        "--jobs",
        jobs,
        "--out",
        out,
    ]);
    run(cli.args).expect("run");
    std::fs::read_to_string(dir.join(format!("superpeers_n300_s{seed}_summary.csv"))).expect("csv")
}

#[test]
fn jobs_do_not_change_the_results() {
    let s = seed();
    // Removed when dropped, also when a run or an assertion fails.
    let base = tempfile::Builder::new().prefix("peerage-superpeers-jobs-").tempdir().expect("temp dir");
    let one = run_to(&base.path().join("one"), "1", s);
    let two = run_to(&base.path().join("two"), "2", s);
    assert!(one.lines().count() == 6, "a header and five rows:\n{one}");
    assert_eq!(one, two, "--jobs 1 and --jobs 2 differ");
}

/// A simulated table read (`Dht::table`, no far nodes) is the Kademlia table of a node that
/// heard of every node: every bucket nearer than the first full one whole, then `bucket`
/// distinct nodes of that full one, checked against a brute-force grouping by shared prefix.
#[test]
fn dht_table_matches_brute_force() {
    let s = seed();
    let mut rng = ChaCha8Rng::seed_from_u64(s ^ 0x7ab1e);
    for &(n, bucket) in &[(1usize, 20usize), (15, 20), (500, 20), (5_000, 20), (5_000, 3)] {
        let ids: Vec<NodeId> = (0..n).map(|_| random_id(&mut rng)).collect();
        let dht = Dht::new(&ids, 20);
        for q in 0..50 {
            let j = rng.gen_range(0..n);
            let x = top128(&ids[j]);
            let mut by_shared: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            for (i, id) in ids.iter().enumerate() {
                if i != j {
                    by_shared.entry((top128(id) ^ x).leading_zeros()).or_default().push(i as u32);
                }
            }
            let (mut whole, mut full) = (Vec::new(), None);
            for (_, members) in by_shared.iter().rev() {
                if members.len() < bucket {
                    whole.extend(members.iter().copied());
                } else {
                    full = Some(members.clone());
                    break;
                }
            }
            let got = dht.table(&ids[j], bucket, 0, &mut rng);
            let (mut got_whole, got_full): (Vec<u32>, Vec<u32>) = got.iter().partition(|i| whole.contains(i));
            got_whole.sort_unstable();
            whole.sort_unstable();
            assert_eq!(got_whole, whole, "seed {s} n {n} query {q}: the buckets before the first full one");
            match &full {
                Some(f) => {
                    let mut distinct = got_full.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    assert_eq!(distinct.len(), bucket, "seed {s} n {n} query {q}: {got_full:?}");
                    assert!(
                        got_full.iter().all(|i| f.contains(i)),
                        "seed {s} n {n} query {q}: outside the full bucket"
                    );
                }
                None => assert!(got_full.is_empty(), "seed {s} n {n} query {q}: {got_full:?}"),
            }
        }
    }
}
