//! Rank folders list exactly the orders StreamingDataset produced (fixtures/orders): one mount
//! per simulated node, listing each served rank's epoch folder in sorted order and reading each
//! position's `sid`/`idx` columns back to a global sample id.

use super::Mount;
use crate::common::fixtures;
use serde_json::Value;
use std::collections::HashMap;

const CASES: &[(&str, &str)] = &[
    ("no-shuffle", "noshuffle/1x1x1x1/ncn8/relaxed"),
    ("py1e", "py1e/2x2x1x8/bs500"),
    ("py1e", "py1e/4x2x2x2/epoch1"),
    ("py1s", "py1s/1x2x2x4/default"),
    ("naive", "naive/1x2x2x4/default"),
    ("py1br", "py1br/2x2x1x8/default"),
    ("py2s", "py2s/4x2x2x2/epoch1"),
    (
        "resume",
        "resume/w2/py1e-bs500/from-2x2x2x6-after-7-batches/to-3x2x2x4",
    ),
    (
        "resume",
        "resume/w1/py1e-bs500/epoch1/from-2x2x1x12-after-5-batches/to-1x2x1x24",
    ),
    ("replication", "replication/4x2x2x2/rep2/py1e-bs500"),
    (
        "mixing",
        "mixing/proportion/epoch_size3000/py1e-bs500/2x2x1x8/epoch1",
    ),
    ("mixing", "mixing/repeat-choose/noshuffle/1x2x2x4/epoch1"),
    ("edge", "edge/tiny/noshuffle/4x2x2x2/ncn8"),
];

fn flag(args: &mut Vec<String>, name: &str, v: &Value) {
    if v.is_null() {
        return;
    }
    args.push(format!("--{name}"));
    args.push(match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
}

fn check_case(group: &str, id: &str) {
    let orders = fixtures().join("orders");
    let file: Value =
        serde_json::from_slice(&std::fs::read(orders.join(format!("{group}.json"))).unwrap())
            .unwrap();
    let case = file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no case {id}"));
    let streams: HashMap<String, &Value> = file["dataset"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s))
        .collect();
    // Global id of (sid, idx): the case's streams numbered one after the other.
    let mut first_of_sid: HashMap<u64, u64> = HashMap::new();
    let mut next = 0u64;
    let mut stream_args: Vec<String> = Vec::new();
    for s in case["streams"].as_array().unwrap() {
        let ds = streams[s["name"].as_str().unwrap()];
        first_of_sid.insert(ds["sid"].as_u64().unwrap(), next);
        next += ds["num_samples"].as_u64().unwrap();
        let mut spec = orders
            .join(ds["path"].as_str().unwrap())
            .to_str()
            .unwrap()
            .to_string();
        for w in ["proportion", "repeat", "choose"] {
            if !s[w].is_null() {
                spec.push_str(&format!(",{w}={}", s[w]));
            }
        }
        stream_args.push(spec);
    }
    let kw = &case["kwargs"];
    let world = &case["world"];
    let mut base: Vec<String> = Vec::new();
    for s in &stream_args {
        base.push("--stream".into());
        base.push(s.clone());
    }
    if kw["shuffle"] == true {
        base.push("--shuffle".into());
    }
    flag(&mut base, "shuffle-algo", &kw["shuffle_algo"]);
    flag(&mut base, "shuffle-seed", &kw["shuffle_seed"]);
    flag(&mut base, "shuffle-block-size", &kw["shuffle_block_size"]);
    flag(&mut base, "canonical-nodes", &kw["num_canonical_nodes"]);
    flag(&mut base, "partition-algo", &kw["partition_algo"]);
    flag(&mut base, "sampling-method", &kw["sampling_method"]);
    flag(
        &mut base,
        "sampling-granularity",
        &kw["sampling_granularity"],
    );
    flag(&mut base, "batching-method", &kw["batching_method"]);
    flag(&mut base, "epoch-size", &kw["epoch_size"]);
    flag(&mut base, "replication", &case["replication"]);
    flag(&mut base, "nodes", &world["num_nodes"]);
    flag(&mut base, "ranks-per-node", &world["ranks_per_node"]);
    flag(&mut base, "workers", &world["workers_per_rank"]);
    flag(&mut base, "batch-size", &world["batch_size"]);
    let state_dir = tempfile::tempdir().unwrap();
    if !case["resume"].is_null() {
        let p = state_dir.path().join("state.json");
        std::fs::write(&p, case["resume"]["state"].to_string()).unwrap();
        base.push("--resume-state".into());
        base.push(p.to_str().unwrap().into());
    }
    let epoch = case["epoch"].as_u64().unwrap();
    let nodes = world["num_nodes"].as_u64().unwrap();
    let rpn = world["ranks_per_node"].as_u64().unwrap();
    for node in 0..nodes {
        let mut args = base.clone();
        args.push("--node-rank".into());
        args.push(node.to_string());
        args.push("--epochs".into());
        args.push((epoch + 1).to_string());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let m = Mount::new("", &refs);
        let ranks: Vec<String> = (0..rpn)
            .map(|l| format!("rank-{}", node * rpn + l))
            .collect();
        let mut root = m.list("");
        root.retain(|n| n.starts_with("rank-"));
        let mut want_ranks = ranks.clone();
        want_ranks.sort();
        assert_eq!(root, want_ranks, "{id} node {node}");
        for r in &ranks {
            let want: Vec<u64> = case["ranks"][r.trim_start_matches("rank-")]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            let rel = format!("{r}/epoch-{epoch}");
            let names = m.list(&rel);
            let dir = m.mnt.join(&rel);
            let read = |n: &str| -> u64 {
                std::fs::read_to_string(dir.join(n))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap()
            };
            let got: Vec<u64> = names
                .iter()
                .filter(|n| n.ends_with(".idx.txt"))
                .map(|n| {
                    let pos = n.split('.').next().unwrap();
                    let sid = read(&format!("{pos}.sid.txt"));
                    first_of_sid[&sid] + read(n)
                })
                .collect();
            assert_eq!(got.len(), want.len(), "{id} {rel}: sample count");
            assert_eq!(got, want, "{id} {rel}");
        }
    }
}

#[test]
fn rank_folders_match_streamingdataset_orders() {
    for (group, id) in CASES {
        check_case(group, id);
    }
}
