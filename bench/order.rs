//! Plan-generation benchmark: one node's full plan (8 ranks) for N samples over 10,000 shards,
//! py1e and py1s, timed on one core, with the process's peak RSS.
//!
//! `cargo bench --bench order` runs the matrix, each configuration in a fresh process so that
//! VmHWM is that configuration's own peak; `cargo bench --bench order -- ALGO N` runs one and
//! prints a JSON line. `bench/order_upstream.sh` times upstream on the same inputs.

use shardfs::order::shuffle::{get_shuffle, ShuffleParams};
use shardfs::order::{OrderOptions, Planner, ShuffleAlgo, StreamSpec, StreamWeight, World};
use std::time::Instant;

/// 10,000 shards of nearly equal size summing to `n` (the same rule as order_upstream.py).
fn shards(n: u64) -> Vec<u64> {
    let k = 10_000u64;
    (0..k).map(|i| n * (i + 1) / k - n * i / k).collect()
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// CPU time of this thread, in seconds (robust against other load on the machine).
fn thread_cpu_seconds() -> f64 {
    // /proc/thread-self/stat fields 14 and 15: utime and stime in clock ticks (100 Hz).
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0)
}

fn run_one(algo: &str, n: u64) {
    let shuffle_algo = match algo {
        "py1s" => ShuffleAlgo::Py1s,
        "py1e" => ShuffleAlgo::Py1e,
        "py2s" => ShuffleAlgo::Py2s,
        "py1br" => ShuffleAlgo::Py1br,
        "naive" => ShuffleAlgo::Naive,
        other => panic!("unknown algo {other}"),
    };
    let streams = vec![StreamSpec {
        shard_samples: shards(n),
        weight: StreamWeight::Unset,
    }];
    let opts = OrderOptions {
        shuffle: true,
        shuffle_algo,
        ..OrderOptions::default()
    };
    let world = World {
        nodes: 1,
        ranks_per_node: 8,
        workers_per_rank: 1,
        batch_size: 32,
    };
    let rss_before = peak_rss_kib();
    let cpu0 = thread_cpu_seconds();
    let t = Instant::now();
    let planner = Planner::new(streams.clone(), opts, world, None).expect("planner");
    let orders = planner.node_orders(0, 0).expect("plan");
    let secs = t.elapsed().as_secs_f64();
    let cpu = thread_cpu_seconds() - cpu0;
    let peak = peak_rss_kib();
    let mut checksum = 0u64;
    let mut total = 0u64;
    for o in &orders {
        for (i, &id) in o.iter().enumerate() {
            checksum = checksum.wrapping_add((i as u64 + 1).wrapping_mul(id));
        }
        total += o.len() as u64;
    }
    drop(orders);
    // The shuffle alone (its share of the plan), measured after the plan so the peak RSS above
    // is the plan's.
    let t = Instant::now();
    let shuffle_len = get_shuffle(
        shuffle_algo,
        ShuffleParams {
            units: &streams[0].shard_samples,
            canonical: planner.num_canonical_nodes(),
            seed: 9176,
            epoch: 0,
            block_size: planner.shuffle_block_size(),
        },
    )
    .expect("shuffle")
    .len();
    let shuffle_secs = t.elapsed().as_secs_f64();
    assert_eq!(shuffle_len as u64, n);
    println!(
        "{{\"impl\":\"shardfs\",\"algo\":\"{algo}\",\"samples\":{n},\"seconds\":{secs:.3},\"cpu_seconds\":{cpu:.2},\"shuffle_seconds\":{shuffle_secs:.3},\"samples_per_sec\":{:.0},\
         \"peak_rss_mib\":{:.1},\"rss_before_mib\":{:.1},\"bytes_per_sample\":{:.2},\"plan_ids\":{total},\"checksum\":{checksum}}}",
        n as f64 / secs,
        peak as f64 / 1024.0,
        rss_before as f64 / 1024.0,
        (peak as f64 * 1024.0) / n as f64,
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.len() == 2 {
        run_one(&args[0], args[1].parse().expect("sample count"));
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    for n in [10_000_000u64, 100_000_000] {
        for algo in ["py1e", "py1s"] {
            let status = std::process::Command::new(&exe)
                .args([algo, &n.to_string()])
                .status()
                .expect("spawn");
            assert!(status.success(), "{algo} {n} failed");
        }
    }
}
