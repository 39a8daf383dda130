//! `shardfs inspect` and `shardfs cat` through the real binary, on a representative subset of
//! the fixtures (first, middle and last sample of every dataset, every column).

use super::check::{b64, check_value};
use super::fixtures::datasets;
use crate::common::shardfs_bin;
use serde_json::Value;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(shardfs_bin()).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn cat_prints_raw_and_rendered_columns() {
    let mut runs = 0;
    for dir in datasets() {
        let lines: Vec<String> = std::fs::read_to_string(dir.join("expected.jsonl"))
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let index: Value =
            serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        let shard0 = &index["shards"][0];
        let names = shard0["column_names"].as_array().unwrap();
        let encodings = shard0["column_encodings"].as_array().unwrap();
        let src = dir.to_str().unwrap();
        let n = lines.len();
        for sample in [0, n / 2, n - 1] {
            let expected: Value = serde_json::from_str(&lines[sample]).unwrap();
            let id = sample.to_string();
            for (name, enc) in names.iter().zip(encodings) {
                let name = name.as_str().unwrap();
                let raw = run(&["cat", src, &id, "--column", name, "--raw"]);
                assert!(raw.status.success(), "{src} {id} {name}: {}", stderr(&raw));
                assert_eq!(raw.stdout, b64(expected[name]["raw"].as_str().unwrap()));
                let rendered = run(&["cat", src, &id, "--column", name]);
                assert!(rendered.status.success(), "{}", stderr(&rendered));
                let enc = enc.as_str().unwrap();
                let enc = if enc.starts_with("ndarray") {
                    "ndarray"
                } else {
                    enc
                };
                check_value(
                    enc,
                    &raw.stdout,
                    &rendered.stdout,
                    &expected[name]["value"],
                    &lines[sample],
                );
                runs += 2;
            }
        }
    }
    assert!(runs > 300, "{runs}");
}

#[test]
fn cat_errors_are_one_clear_line() {
    let basic = crate::common::fixtures().join("mds/basic");
    let src = basic.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["cat", src, "0"], "blob, id, label, text"),
        (&["cat", src, "1000", "--column", "id"], "out of range"),
        (
            &["cat", src, "0", "--column", "nope"],
            "columns are: blob, id, label, text",
        ),
        (&["cat", "/no/such/dataset", "0"], "index.json"),
    ];
    for (args, needle) in cases {
        let o = run(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(o.stdout.is_empty());
        let e = stderr(&o);
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(e.contains(needle), "{args:?}: {e}");
    }
}

#[test]
fn cat_reports_a_corrupt_shard_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let basic = crate::common::fixtures().join("mds/basic");
    for f in ["index.json", "shard.00000.mds", "shard.00001.mds"] {
        std::fs::copy(basic.join(f), tmp.path().join(f)).unwrap();
    }
    let shard = tmp.path().join("shard.00001.mds");
    let mut bytes = std::fs::read(&shard).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&shard, bytes).unwrap();
    let src = tmp.path().to_str().unwrap();
    // Sample 0 lives in the intact shard 0; only shard 1 is read for the last sample of it.
    assert!(run(&["cat", src, "0", "--column", "id"]).status.success());
    let n0 = {
        let idx: Value =
            serde_json::from_slice(&std::fs::read(basic.join("index.json")).unwrap()).unwrap();
        idx["shards"][0]["samples"].as_u64().unwrap()
    };
    let o = run(&["cat", src, &n0.to_string(), "--column", "id"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("shard.00001.mds") && e.contains("hash mismatch"),
        "{e}"
    );
}

#[test]
fn inspect_json_and_text() {
    let dir = crate::common::fixtures().join("mds/compressed-zstd");
    let url = format!("file://{}", dir.canonicalize().unwrap().display());
    let o = run(&["inspect", &url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let shards = index["shards"].as_array().unwrap();
    let sum = |key: &str| -> u64 {
        shards
            .iter()
            .map(|s| s[key]["bytes"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(v["samples"], 300);
    assert_eq!(v["shards"].as_u64().unwrap() as usize, shards.len());
    assert_eq!(v["raw_bytes"].as_u64().unwrap(), sum("raw_data"));
    assert_eq!(v["zip_bytes"].as_u64().unwrap(), sum("zip_data"));
    assert_eq!(v["compression"], serde_json::json!(["zstd:7"]));
    let cols = v["columns"].as_array().unwrap();
    let got: Vec<(String, String, Value)> = cols
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().into(),
                c["encoding"].as_str().unwrap().into(),
                c["size"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, String, Value)> = (0..4)
        .map(|k| {
            (
                shards[0]["column_names"][k].as_str().unwrap().into(),
                shards[0]["column_encodings"][k].as_str().unwrap().into(),
                shards[0]["column_sizes"][k].clone(),
            )
        })
        .collect();
    assert_eq!(got, want);
    let t = run(&["inspect", dir.to_str().unwrap()]);
    assert!(t.status.success());
    let text = String::from_utf8(t.stdout).unwrap();
    assert!(
        text.contains("samples      300") && text.contains("zstd:7"),
        "{text}"
    );
}

#[test]
fn help_documents_every_flag() {
    for (cmd, flags) in [
        ("cat", &["--column", "--raw"][..]),
        ("inspect", &["--json"][..]),
    ] {
        let o = run(&[cmd, "--help"]);
        assert!(o.status.success());
        let h = String::from_utf8(o.stdout).unwrap();
        for f in flags {
            assert!(h.contains(f), "{cmd} --help lacks {f}");
        }
    }
}
