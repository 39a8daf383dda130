//! Tests of the `order` module and the `order` command against `fixtures/orders`: every case of
//! every group file reproduced for every rank (and the whole work array where the fixture
//! stores it), every rejected configuration refused, plus property tests of the invariants
//! upstream's design promises (coverage, elastic determinism, resumption).

use crate::common::{fixtures, shardfs_bin};
use serde_json::Value;
use shardfs::order::{
    BatchingMethod, OrderError, OrderOptions, PartitionAlgo, Planner, ResumeState, SamplingMethod,
    ShuffleAlgo, StreamSpec, StreamWeight, World,
};
use std::collections::HashMap;
use std::path::PathBuf;

const GROUPS: &[&str] = &[
    "no-shuffle",
    "naive",
    "py1s",
    "py2s",
    "py1br",
    "py1e",
    "resume",
    "replication",
    "mixing",
    "edge",
];

fn orders_dir() -> PathBuf {
    fixtures().join("orders")
}

fn load(group: &str) -> Value {
    let path = orders_dir().join(format!("{group}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("expected an unsigned integer, got {v}"))
}

/// Builds the planner inputs a fixture case (or rejected entry) describes.
struct CaseInputs {
    streams: Vec<StreamSpec>,
    opts: OrderOptions,
    world: World,
    resume: Option<ResumeState>,
    epoch: u64,
}

fn shard_table(group: &Value) -> HashMap<String, Vec<u64>> {
    group["dataset"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["shard_samples"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(u)
                    .collect(),
            )
        })
        .collect()
}

fn world_of(w: &Value) -> World {
    World {
        nodes: u(&w["num_nodes"]),
        ranks_per_node: u(&w["ranks_per_node"]),
        workers_per_rank: u(&w["workers_per_rank"]),
        batch_size: w.get("batch_size").map(u).unwrap_or(1),
    }
}

pub(crate) fn options_of(kwargs: &Value, replication: &Value) -> OrderOptions {
    let mut o = OrderOptions::default();
    let k = kwargs.as_object().unwrap();
    for (key, v) in k {
        match key.as_str() {
            "shuffle" => o.shuffle = v.as_bool().unwrap(),
            "shuffle_algo" => {
                o.shuffle_algo = match v.as_str().unwrap() {
                    "naive" => ShuffleAlgo::Naive,
                    "py1s" => ShuffleAlgo::Py1s,
                    "py2s" => ShuffleAlgo::Py2s,
                    "py1br" => ShuffleAlgo::Py1br,
                    "py1e" => ShuffleAlgo::Py1e,
                    other => panic!("unknown shuffle_algo {other}"),
                }
            }
            "shuffle_seed" => o.shuffle_seed = u(v),
            "shuffle_block_size" => o.shuffle_block_size = Some(u(v)),
            "num_canonical_nodes" => o.num_canonical_nodes = Some(u(v)),
            "partition_algo" => {
                o.partition_algo = match v.as_str().unwrap() {
                    "orig" => PartitionAlgo::Orig,
                    "relaxed" => PartitionAlgo::Relaxed,
                    other => panic!("unknown partition_algo {other}"),
                }
            }
            "sampling_method" => {
                o.sampling_method = match v.as_str().unwrap() {
                    "balanced" => SamplingMethod::Balanced,
                    "fixed" => SamplingMethod::Fixed,
                    other => panic!("unknown sampling_method {other}"),
                }
            }
            "sampling_granularity" => o.sampling_granularity = u(v),
            "batching_method" => {
                o.batching_method = match v.as_str().unwrap() {
                    "random" => BatchingMethod::Random,
                    "stratified" => BatchingMethod::Stratified,
                    "per_stream" => BatchingMethod::PerStream,
                    "device_per_stream" => BatchingMethod::DevicePerStream,
                    other => panic!("unknown batching_method {other}"),
                }
            }
            "epoch_size" => o.epoch_size = Some(u(v)),
            other => panic!("unhandled kwarg {other}"),
        }
    }
    o.replication = replication.as_u64();
    o
}

fn inputs(group: &Value, case: &Value) -> CaseInputs {
    let table = shard_table(group);
    let streams = case["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let name = s["name"].as_str().unwrap();
            let weight = if let Some(p) = s.get("proportion") {
                StreamWeight::Proportion(p.as_f64().unwrap())
            } else if let Some(r) = s.get("repeat") {
                StreamWeight::Repeat(r.as_f64().unwrap())
            } else if let Some(c) = s.get("choose") {
                StreamWeight::Choose(u(c))
            } else {
                StreamWeight::Unset
            };
            StreamSpec {
                shard_samples: table[name].clone(),
                weight,
            }
        })
        .collect();
    let opts = options_of(&case["kwargs"], &case["replication"]);
    let world = world_of(&case["world"]);
    let resume = match &case["resume"] {
        Value::Null => None,
        r => Some(match r.get("state") {
            Some(st) => serde_json::from_value(st.clone()).unwrap(),
            None => {
                // Rejected entries omit the state: rebuild it as the first run's state_dict().
                let first = world_of(&r["first_world"]);
                let gbs = first.nodes * first.ranks_per_node * first.batch_size;
                ResumeState {
                    epoch: u(&r["first_epoch"]),
                    sample_in_epoch: u(&r["steps"]) * gbs,
                    num_canonical_nodes: opts.num_canonical_nodes.unwrap_or(
                        match opts.shuffle_algo {
                            ShuffleAlgo::Py1s | ShuffleAlgo::Py2s => 64 * first.nodes,
                            _ => first.nodes,
                        },
                    ),
                    shuffle_seed: opts.shuffle_seed,
                    initial_physical_nodes: Some(first.nodes),
                }
            }
        }),
    };
    let epoch = case["epoch"].as_u64().unwrap_or(0);
    CaseInputs {
        streams,
        opts,
        world,
        resume,
        epoch,
    }
}

fn first_difference(got: &[u64], want: &[u64]) -> String {
    let pos = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let show = |v: &[u64]| format!("{:?}", &v[pos.saturating_sub(2)..(pos + 3).min(v.len())]);
    format!(
        "first difference at position {pos} (got len {}, want len {}): got …{}…, want …{}…",
        got.len(),
        want.len(),
        show(got),
        show(want)
    )
}

/// Checks one case; returns a description of each mismatch.
fn check_case(group: &Value, case: &Value) -> Vec<String> {
    let id = case["id"].as_str().unwrap();
    let inp = inputs(group, case);
    let planner = match Planner::new(inp.streams, inp.opts, inp.world, inp.resume) {
        Ok(p) => p,
        Err(e) => return vec![format!("{id}: refused: {e}")],
    };
    let mut errs = Vec::new();
    let resolved = &case["resolved"];
    if planner.epoch_size() != u(&resolved["epoch_size"]) {
        errs.push(format!(
            "{id}: epoch_size {} != {}",
            planner.epoch_size(),
            resolved["epoch_size"]
        ));
    }
    if planner.num_canonical_nodes() != u(&resolved["num_canonical_nodes"]) {
        errs.push(format!(
            "{id}: num_canonical_nodes {} != {}",
            planner.num_canonical_nodes(),
            resolved["num_canonical_nodes"]
        ));
    }
    if planner.shuffle_block_size() != u(&resolved["shuffle_block_size"]) {
        errs.push(format!(
            "{id}: shuffle_block_size {} != {}",
            planner.shuffle_block_size(),
            resolved["shuffle_block_size"]
        ));
    }
    for (i, (d, want)) in planner
        .stream_draws()
        .iter()
        .zip(resolved["streams"].as_array().unwrap())
        .enumerate()
    {
        // The generator reports a `choose` stream's proportion one ulp above choose / epoch_size
        // (333/3351 → …805 instead of …803); everything upstream derives from it matches, so
        // compare proportions to a few ulps.
        let want_p = want["proportion"].as_f64().unwrap();
        if d.choose != u(&want["choose"])
            || (d.proportion - want_p).abs() > 4.0 * f64::EPSILON * want_p
        {
            errs.push(format!("{id}: stream {i} draw {d:?} != {want}"));
        }
    }
    if let Some(ids) = case.get("ids") {
        match planner.work_array(inp.epoch) {
            Err(e) => errs.push(format!("{id}: work array: {e}")),
            Ok((shape, got)) => {
                let want_shape: Vec<u64> = case["ids_shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(u)
                    .collect();
                let got_shape = vec![
                    shape.nodes,
                    shape.ranks,
                    shape.workers,
                    shape.batches,
                    shape.batch,
                ];
                if got_shape != want_shape {
                    errs.push(format!("{id}: ids_shape {got_shape:?} != {want_shape:?}"));
                }
                let want: Vec<u64> = ids
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_i64().unwrap() as u64)
                    .collect();
                let got: Vec<u64> = got.iter().map(|v| v.unwrap_or(u64::MAX)).collect();
                if got != want {
                    errs.push(format!("{id}: ids: {}", first_difference(&got, &want)));
                }
            }
        }
    }
    let ranks = case["ranks"].as_object().unwrap();
    let rpn = inp.world.ranks_per_node;
    for node in 0..inp.world.nodes {
        let got = match planner.node_orders(inp.epoch, node) {
            Ok(g) => g,
            Err(e) => {
                errs.push(format!("{id}: node {node}: {e}"));
                continue;
            }
        };
        for (local, got) in got.iter().enumerate() {
            let g = node * rpn + local as u64;
            let want: Vec<u64> = ranks[&g.to_string()]
                .as_array()
                .unwrap()
                .iter()
                .map(u)
                .collect();
            if *got != want {
                errs.push(format!("{id}: rank {g}: {}", first_difference(got, &want)));
            }
        }
    }
    errs
}

fn run_group(name: &str) {
    let group = load(name);
    let cases = group["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    let mut passed = 0;
    for case in cases {
        let errs = check_case(&group, case);
        if errs.is_empty() {
            passed += 1;
        } else {
            failures.extend(errs);
        }
    }
    let mut refused = 0;
    let rejected = group["rejected"].as_array().cloned().unwrap_or_default();
    for rej in &rejected {
        let id = rej["id"].as_str().unwrap();
        let inp = inputs(&group, rej);
        let result = Planner::new(inp.streams, inp.opts, inp.world, inp.resume).and_then(|p| {
            (0..inp.world.nodes).try_for_each(|n| p.node_orders(inp.epoch, n).map(|_| ()))
        });
        match result {
            Err(e) => {
                let want = rej["error"].as_str().unwrap_or("");
                if expected_error_matches(&e, want) {
                    refused += 1;
                } else {
                    failures.push(format!(
                        "{id}: refused with `{e}`, but upstream says `{want}`"
                    ));
                }
            }
            Ok(()) => failures.push(format!(
                "{id}: accepted, but upstream refuses: {}",
                rej["error"]
            )),
        }
    }
    eprintln!(
        "order fixtures {name}: {passed}/{} cases match, {refused}/{} rejected refused",
        cases.len(),
        rejected.len()
    );
    assert!(
        failures.is_empty(),
        "{name}: {} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Whether our error means what upstream's exception says.
fn expected_error_matches(e: &OrderError, upstream: &str) -> bool {
    match e {
        OrderError::NodesNotDivisible { .. } => upstream.contains("evenly divisible by the other"),
        OrderError::GlobalBatchChanged { .. } => upstream.contains("global batch size"),
        OrderError::EmptyCanonicalNode { .. } => {
            upstream.contains("assigned to a canonical node is 0")
        }
        OrderError::MixedWeights { .. } => upstream.contains("incompatible with each other"),
        OrderError::EpochSizeWithAbsoluteWeights => upstream.contains("Only provide `choose`"),
        _ => false,
    }
}

#[test]
fn fixtures_no_shuffle() {
    run_group("no-shuffle");
}
#[test]
fn fixtures_naive() {
    run_group("naive");
}
#[test]
fn fixtures_py1s() {
    run_group("py1s");
}
#[test]
fn fixtures_py2s() {
    run_group("py2s");
}
#[test]
fn fixtures_py1br() {
    run_group("py1br");
}
#[test]
fn fixtures_py1e() {
    run_group("py1e");
}
#[test]
fn fixtures_resume() {
    run_group("resume");
}
#[test]
fn fixtures_replication() {
    run_group("replication");
}
#[test]
fn fixtures_mixing() {
    run_group("mixing");
}
#[test]
fn fixtures_edge() {
    run_group("edge");
}

#[test]
fn every_group_file_is_tested() {
    let mut files: Vec<String> = std::fs::read_dir(orders_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect();
    files.sort();
    let mut known: Vec<String> = GROUPS.iter().map(|s| s.to_string()).collect();
    known.sort();
    assert_eq!(files, known);
}

/// The `shardfs order` flags that express a fixture case (streams as `--stream` when mixed).
fn cli_args(group: &Value, case: &Value, rank: u64, dir: &std::path::Path) -> Vec<String> {
    let paths: HashMap<String, String> = group["dataset"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut a: Vec<String> = vec!["order".into()];
    let streams = case["streams"].as_array().unwrap();
    let weighted = streams.len() > 1 || streams.iter().any(|s| s.as_object().unwrap().len() > 1);
    for s in streams {
        let path = orders_dir().join(&paths[s["name"].as_str().unwrap()]);
        let path = path.to_str().unwrap().to_string();
        if weighted {
            let mut spec = path;
            for key in ["proportion", "repeat", "choose"] {
                if let Some(v) = s.get(key) {
                    spec.push_str(&format!(",{key}={v}"));
                }
            }
            a.extend(["--stream".into(), spec]);
        } else {
            a.push(path);
        }
    }
    for (key, v) in case["kwargs"].as_object().unwrap() {
        let flag = match key.as_str() {
            "shuffle" => {
                if v.as_bool().unwrap() {
                    a.push("--shuffle".into());
                }
                continue;
            }
            "num_canonical_nodes" => "--canonical-nodes".to_string(),
            k => format!("--{}", k.replace('_', "-")),
        };
        a.push(flag);
        a.push(
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string()),
        );
    }
    if let Some(k) = case["replication"].as_u64() {
        a.extend(["--replication".into(), k.to_string()]);
    }
    let w = &case["world"];
    for (flag, key) in [
        ("--nodes", "num_nodes"),
        ("--ranks-per-node", "ranks_per_node"),
        ("--workers", "workers_per_rank"),
        ("--batch-size", "batch_size"),
    ] {
        a.extend([flag.to_string(), u(&w[key]).to_string()]);
    }
    if let Some(state) = case["resume"].get("state") {
        let file = dir.join("state.json");
        std::fs::write(&file, state.to_string()).unwrap();
        a.extend(["--resume-state".into(), file.to_str().unwrap().to_string()]);
    }
    a.extend([
        "--epoch".into(),
        case["epoch"].to_string(),
        "--rank".into(),
        rank.to_string(),
    ]);
    a
}

fn run_cli(args: &[String]) -> std::process::Output {
    std::process::Command::new(shardfs_bin())
        .args(args)
        .env_remove("WORLD_SIZE")
        .env_remove("LOCAL_WORLD_SIZE")
        .env_remove("NODE_RANK")
        .env_remove("GROUP_RANK")
        .output()
        .expect("running shardfs")
}

#[test]
fn order_command_prints_fixture_rank_orders() {
    let picks = [
        ("py1e", "py1e/4x2x2x2/bs500/ncn8", &[0u64, 5][..]),
        ("py2s", "py2s/4x2x2x2/epoch1", &[3]),
        (
            "resume",
            "resume/w1/py1e-bs500/from-2x2x1x12-after-5-batches/to-3x2x1x8",
            &[0, 3],
        ),
        (
            "mixing",
            "mixing/proportion/epoch_size3000/py1e-bs500/2x2x1x8/epoch1",
            &[2],
        ),
        (
            "replication",
            "replication/4x2x2x2/rep2/py1e-bs500",
            &[6, 7],
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (group_name, id, ranks) in picks {
        let group = load(group_name);
        let case = group["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no case {id}"));
        for &rank in ranks {
            let args = cli_args(&group, case, rank, dir.path());
            let out = run_cli(&args);
            assert!(
                out.status.success(),
                "{id} rank {rank}: shardfs {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let got: Vec<u64> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(|l| l.parse().unwrap())
                .collect();
            let want: Vec<u64> = case["ranks"][rank.to_string()]
                .as_array()
                .unwrap()
                .iter()
                .map(u)
                .collect();
            assert!(
                got == want,
                "{id} rank {rank} via {args:?}: {}",
                first_difference(&got, &want)
            );
        }
    }
}

#[test]
fn order_command_refuses_what_upstream_refuses() {
    let group = load("no-shuffle");
    let rej = &group["rejected"][0];
    let dir = tempfile::tempdir().unwrap();
    let args = cli_args(&group, rej, 0, dir.path());
    let out = run_cli(&args);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("evenly divisible"), "unexpected error: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line expected: {err}");
    let out = run_cli(&[
        "order".into(),
        dir.path().join("missing").to_str().unwrap().into(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("index.json"));
}

mod properties {
    //! Invariants upstream's design promises, over random datasets and worlds.
    use super::*;
    use proptest::prelude::*;

    fn algo_strategy() -> impl Strategy<Value = Option<ShuffleAlgo>> {
        prop_oneof![
            Just(None),
            Just(Some(ShuffleAlgo::Naive)),
            Just(Some(ShuffleAlgo::Py1s)),
            Just(Some(ShuffleAlgo::Py2s)),
            Just(Some(ShuffleAlgo::Py1br)),
            Just(Some(ShuffleAlgo::Py1e)),
        ]
    }

    fn options(algo: Option<ShuffleAlgo>, canonical: u64, block: u64, seed: u64) -> OrderOptions {
        OrderOptions {
            shuffle: algo.is_some(),
            shuffle_algo: algo.unwrap_or(ShuffleAlgo::Py1e),
            shuffle_block_size: Some(block),
            num_canonical_nodes: Some(canonical),
            shuffle_seed: seed,
            ..OrderOptions::default()
        }
    }

    fn one_stream(shards: &[u64]) -> Vec<StreamSpec> {
        vec![StreamSpec {
            shard_samples: shards.to_vec(),
            weight: StreamWeight::Unset,
        }]
    }

    /// Every rank's order, indexed by global rank.
    fn all_ranks(p: &Planner, epoch: u64) -> Vec<Vec<u64>> {
        let w = p.world();
        (0..w.nodes)
            .flat_map(|n| p.node_orders(epoch, n).unwrap())
            .collect()
    }

    /// The global sequence T read off an orig-compatible plan: sample i of node p, local rank
    /// r is T[p + P·(r + R·i)].
    fn global_sequence(p: &Planner, epoch: u64) -> Vec<Option<u64>> {
        let w = p.world();
        let ranks = all_ranks(p, epoch);
        let len = ranks.iter().map(Vec::len).max().unwrap_or(0) as u64 * w.nodes * w.ranks_per_node;
        let mut t = vec![None; len as usize];
        for node in 0..w.nodes {
            for r in 0..w.ranks_per_node {
                for (i, &id) in ranks[(node * w.ranks_per_node + r) as usize]
                    .iter()
                    .enumerate()
                {
                    t[(node + w.nodes * (r + w.ranks_per_node * i as u64)) as usize] = Some(id);
                }
            }
        }
        t
    }

    fn world(nodes: u64, ranks: u64, workers: u64, batch: u64) -> World {
        World {
            nodes,
            ranks_per_node: ranks,
            workers_per_rank: workers,
            batch_size: batch,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn an_epoch_covers_every_sample(
            shards in proptest::collection::vec(0u64..60, 1..12),
            algo in algo_strategy(),
            cexp in 0u32..4, pexp in 0u32..4,
            ranks in 1u64..4, workers in 1u64..3, batch in 1u64..5,
            block in 4u64..300, epoch in 0u64..3, seed in 0u64..100_000,
        ) {
            let n: u64 = shards.iter().sum();
            let (c, nodes) = (1u64 << cexp, 1u64 << pexp);
            prop_assume!(n >= 2 * c.max(nodes));
            let p = Planner::new(one_stream(&shards), options(algo, c, block, seed), world(nodes, ranks, workers, batch), None).unwrap();
            let mut seen = vec![0u64; n as usize];
            let mut total = 0u64;
            for order in all_ranks(&p, epoch) {
                for id in order {
                    prop_assert!(id < n, "id {} outside 0..{}", id, n);
                    seen[id as usize] += 1;
                    total += 1;
                }
            }
            prop_assert!(seen.iter().all(|&k| k >= 1), "a sample is missing");
            // Extra copies are partition padding only: short canonical rows, C < P padding,
            // and per-node rank padding.
            prop_assert!(total - n <= c + nodes + nodes * ranks, "{} extra copies", total - n);
        }

        #[test]
        fn the_global_sequence_does_not_depend_on_the_world(
            shards in proptest::collection::vec(1u64..60, 1..12),
            algo in algo_strategy(),
            cexp in 0u32..4, p1 in 0u32..4, p2 in 0u32..4,
            r1 in 1u64..4, r2 in 1u64..4, w1 in 1u64..3, w2 in 1u64..3, b1 in 1u64..5, b2 in 1u64..5,
            block in 4u64..300, epoch in 0u64..2,
        ) {
            let n: u64 = shards.iter().sum();
            let c = 1u64 << cexp;
            prop_assume!(n >= 2 * c);
            let opts = options(algo, c, block, 9176);
            let a = Planner::new(one_stream(&shards), opts.clone(), world(1 << p1, r1, w1, b1), None);
            let b = Planner::new(one_stream(&shards), opts, world(1 << p2, r2, w2, b2), None);
            // Upstream refuses some tiny C < P layouts (too few samples to pad); so do we.
            if let Err(e) = &a { prop_assert!(matches!(e, OrderError::TooFewSamplesToPad { .. }), "{}", e); }
            if let Err(e) = &b { prop_assert!(matches!(e, OrderError::TooFewSamplesToPad { .. }), "{}", e); }
            prop_assume!(a.is_ok() && b.is_ok());
            let (a, b) = (a.unwrap(), b.unwrap());
            let (ta, tb) = (global_sequence(&a, epoch), global_sequence(&b, epoch));
            // Positions below C·⌈N/C⌉ are the canonical matrix itself (padding for C < P and
            // rank padding come after it only when C ≥ P; compare where both worlds have C ≥ P).
            if (1 << p1) <= c && (1 << p2) <= c {
                let len = (c * n.div_ceil(c)) as usize;
                prop_assert_eq!(&ta[..len], &tb[..len]);
            } else {
                // With C < P rows are padded differently; the real samples still come in the
                // same order once repeats are removed.
                let dedup = |t: &[Option<u64>]| {
                    let mut seen = std::collections::HashSet::new();
                    t.iter().flatten().filter(|&&v| seen.insert(v)).copied().collect::<Vec<u64>>()
                };
                prop_assert_eq!(dedup(&ta).len() as u64, n);
                prop_assert_eq!(dedup(&tb).len() as u64, n);
            }
        }

        #[test]
        fn a_resumed_run_continues_the_interrupted_global_steps(
            shards in proptest::collection::vec(1u64..80, 2..12),
            algo in algo_strategy(),
            p0 in 1u64..5, p1 in 1u64..6, ranks in 1u64..3, workers in 1u64..3, k in 1u64..3,
            block in 4u64..300, steps in 0u64..5,
        ) {
            // First run on p0 nodes (NCN defaults to p0), resumed on p1 nodes with the same
            // global batch: relaxed re-deals the interrupted order when p0 and p1 do not
            // divide each other.
            let n: u64 = shards.iter().sum();
            let base = p0 * p1 * k;
            let (b0, b1) = (base / p0, base / p1);
            let gbs = base * ranks;
            prop_assume!(n >= 2 * p0.max(p1) && (steps + 2) * gbs < n);
            let opts = options(algo, p0, block, 9176);
            let first = Planner::new(one_stream(&shards), opts.clone(), world(p0, ranks, workers, b0), None);
            prop_assume!(first.is_ok());
            let first = first.unwrap();
            let state = ResumeState {
                epoch: 0,
                sample_in_epoch: steps * gbs,
                num_canonical_nodes: p0,
                shuffle_seed: 9176,
                initial_physical_nodes: Some(p0),
            };
            let resumed = Planner::new(one_stream(&shards), opts, world(p1, ranks, workers, b1), Some(state));
            let resumed = match resumed {
                Ok(r) => r,
                Err(e) => {
                    // Only upstream's own refusals are acceptable.
                    prop_assert!(matches!(e, OrderError::TooFewSamplesToPad { .. }), "{}", e);
                    return Ok(());
                }
            };
            let step_sets = |p: &Planner, batch: u64| -> Vec<Vec<u64>> {
                let ranks = all_ranks(p, 0);
                let b = batch as usize;
                let nsteps = ranks.iter().map(|r| r.len().div_ceil(b)).max().unwrap_or(0);
                (0..nsteps)
                    .map(|s| {
                        let mut v: Vec<u64> = ranks.iter().flat_map(|r| r.iter().skip(s * b).take(b).copied()).collect();
                        v.sort_unstable();
                        v
                    })
                    .collect()
            };
            let before = step_sets(&first, b0);
            let after = step_sets(&resumed, b1);
            let k0 = steps as usize;
            let comparable = after.len().saturating_sub(2).min(before.len().saturating_sub(k0 + 2));
            for s in 0..comparable {
                prop_assert_eq!(&after[s], &before[k0 + s], "global step {} after resuming", s);
            }
        }

        #[test]
        fn resuming_drops_exactly_the_consumed_samples(
            shards in proptest::collection::vec(1u64..60, 2..12),
            algo in algo_strategy(),
            cexp in 0u32..3, p0exp in 0u32..3, p1exp in 0u32..3,
            ranks in 1u64..3, workers in 1u64..3, per_node_batch in 1u64..4,
            block in 4u64..300, steps in 0u64..6, epoch in 0u64..2,
        ) {
            let n: u64 = shards.iter().sum();
            let c = 1u64 << cexp;
            let (p0, p1) = (1u64 << p0exp, 1u64 << p1exp);
            prop_assume!(n >= 2 * c.max(p0).max(p1));
            // Same global batch in both worlds: B·P constant.
            let gbs_per_rank = per_node_batch * 4;
            let (b0, b1) = (gbs_per_rank / p0, gbs_per_rank / p1);
            let gbs = gbs_per_rank * ranks;
            prop_assume!(steps * gbs < n);
            let opts = options(algo, c, block, 9176);
            let first = Planner::new(one_stream(&shards), opts.clone(), world(p0, ranks, workers, b0), None).unwrap();
            let state = ResumeState {
                epoch,
                sample_in_epoch: steps * gbs,
                num_canonical_nodes: c,
                shuffle_seed: 9176,
                initial_physical_nodes: Some(p0),
            };
            let resumed = Planner::new(one_stream(&shards), opts, world(p1, ranks, workers, b1), Some(state)).unwrap();
            // Both node counts divide C or are divided by it here, so T continues at the
            // resume point: the resumed T is the fresh T without its first steps·GBS samples.
            let fresh = global_sequence(&first, epoch);
            let again = global_sequence(&resumed, epoch);
            let skip = (steps * gbs) as usize;
            let real = (c * n.div_ceil(c)) as usize;
            if p0 <= c && p1 <= c {
                prop_assert_eq!(&fresh[skip..real], &again[..real - skip]);
            }
            // Later epochs are whole.
            prop_assert_eq!(all_ranks(&resumed, epoch + 1).concat().len(),
                all_ranks(&Planner::new(one_stream(&shards), options(algo, c, block, 9176), world(p1, ranks, workers, b1), None).unwrap(), epoch + 1).concat().len());
        }
    }
}

/// Absurd sizes (from a corrupt index.json or flags) are refused, never a panic or overflow.
#[test]
fn absurd_sizes_are_refused() {
    let world = World {
        nodes: 1,
        ranks_per_node: 1,
        workers_per_rank: 1,
        batch_size: 1,
    };
    let stream = |shard_samples: Vec<u64>, weight| {
        vec![StreamSpec {
            shard_samples,
            weight,
        }]
    };
    let cases: Vec<(Vec<StreamSpec>, OrderOptions, World)> = vec![
        (
            stream(vec![u64::MAX, 5], StreamWeight::Unset),
            OrderOptions::default(),
            world,
        ),
        (
            stream(vec![5], StreamWeight::Choose(u64::MAX)),
            OrderOptions::default(),
            world,
        ),
        (
            stream(vec![5], StreamWeight::Repeat(1e300)),
            OrderOptions::default(),
            world,
        ),
        (
            stream(vec![5], StreamWeight::Repeat(f64::NAN)),
            OrderOptions::default(),
            world,
        ),
        (
            stream(vec![5], StreamWeight::Unset),
            OrderOptions {
                epoch_size: Some(u64::MAX),
                ..OrderOptions::default()
            },
            world,
        ),
        (
            stream(vec![5], StreamWeight::Unset),
            OrderOptions::default(),
            World {
                nodes: u64::MAX,
                ..world
            },
        ),
        (
            stream(vec![5], StreamWeight::Unset),
            OrderOptions {
                num_canonical_nodes: Some(u64::MAX),
                ..OrderOptions::default()
            },
            world,
        ),
        (
            stream(vec![0, 0], StreamWeight::Unset),
            OrderOptions::default(),
            world,
        ),
        (vec![], OrderOptions::default(), world),
        (
            stream(vec![5], StreamWeight::Unset),
            OrderOptions::default(),
            World {
                batch_size: 0,
                ..world
            },
        ),
        (
            stream(vec![5], StreamWeight::Unset),
            OrderOptions {
                replication: Some(3),
                ..OrderOptions::default()
            },
            World {
                ranks_per_node: 2,
                ..world
            },
        ),
    ];
    for (i, (streams, opts, world)) in cases.into_iter().enumerate() {
        let r = Planner::new(streams, opts, world, None);
        assert!(r.is_err(), "case {i} accepted");
    }
    // A resume point past the end of the epoch.
    let state = ResumeState {
        epoch: 0,
        sample_in_epoch: 1000,
        num_canonical_nodes: 1,
        shuffle_seed: 9176,
        initial_physical_nodes: Some(1),
    };
    let r = Planner::new(
        stream(vec![5, 5], StreamWeight::Unset),
        OrderOptions::default(),
        world,
        Some(state),
    );
    assert!(matches!(r, Err(OrderError::ResumePastEnd { .. })), "{r:?}");
}
