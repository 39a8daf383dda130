//! Reads JSON lines of partition/shuffle parameters on stdin, prints our results as JSON lines
//! (used to compare against upstream's Python modules).
use shardfs::order::partition::{Partition, PartitionParams};
use shardfs::order::shuffle::{get_shuffle, ShuffleParams};
use shardfs::order::ShuffleAlgo;
use std::io::BufRead;

fn main() {
    for line in std::io::stdin().lock().lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        let g = |k: &str| v[k].as_u64().unwrap();
        let part = Partition::new(PartitionParams {
            relaxed: v["algo"] == "relaxed",
            num_samples: g("n"),
            canonical: g("c"),
            nodes: g("p"),
            ranks: g("r"),
            workers: g("w"),
            batch: g("b"),
            drop_first: g("d"),
            initial_nodes: v["ipn"].as_u64(),
        });
        let part = match part {
            Ok(p) => {
                let s = p.shape();
                serde_json::json!({"shape": [s.nodes, s.ranks, s.workers, s.batches, s.batch],
                    "ids": p.to_dense().iter().map(|&x| if x == u64::MAX { -1i64 } else { x as i64 }).collect::<Vec<_>>()})
            }
            Err(e) => serde_json::json!({"error": e.to_string()}),
        };
        let units: Vec<u64> = v["units"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let algo = match v["shuffle"].as_str().unwrap() {
            "naive" => ShuffleAlgo::Naive,
            "py1s" => ShuffleAlgo::Py1s,
            "py2s" => ShuffleAlgo::Py2s,
            "py1br" => ShuffleAlgo::Py1br,
            _ => ShuffleAlgo::Py1e,
        };
        let sh = match get_shuffle(
            algo,
            ShuffleParams {
                units: &units,
                canonical: g("c"),
                seed: g("seed"),
                epoch: g("epoch"),
                block_size: g("bs"),
            },
        ) {
            Ok(s) => serde_json::json!(s.to_vec()),
            Err(e) => serde_json::json!({"error": e.to_string()}),
        };
        println!("{}", serde_json::json!({"partition": part, "shuffle": sh}));
    }
}
