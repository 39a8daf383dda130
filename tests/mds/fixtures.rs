//! Every sample and column of every fixture dataset, read through the library: stored bytes
//! equal `expected.jsonl`'s `raw`, and rendered files decode to its `value`.

use super::check::{b64, check_value};
use crate::common::fixtures;
use serde_json::Value;
use shardfs::mds::{self, Index, ShardView};
use std::path::{Path, PathBuf};

pub fn datasets() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures().join("mds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("index.json").is_file())
        .collect();
    v.sort();
    assert!(
        v.len() >= 10,
        "expected the 10 fixture datasets, found {}",
        v.len()
    );
    v
}

/// Reads one shard as a reader would: the stored file, its hashes, decompression, raw hashes.
pub fn load_raw_shard(dir: &Path, entry: &mds::ShardEntry) -> Vec<u8> {
    let stored = entry.stored_file();
    let bytes = std::fs::read(dir.join(&stored.basename)).unwrap();
    mds::verify_hashes(stored, &bytes).unwrap();
    let raw = match &entry.compression {
        Some(c) => mds::decompress(c, &bytes, Some(entry.raw.bytes)).unwrap(),
        None => bytes,
    };
    mds::verify_hashes(&entry.raw, &raw).unwrap();
    raw
}

#[test]
fn every_sample_and_column_matches_expected() {
    let mut checked_values = 0usize;
    for dir in datasets() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let index = Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        let lines: Vec<String> = std::fs::read_to_string(dir.join("expected.jsonl"))
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(index.num_samples(), lines.len() as u64, "{name}");
        let mut global = 0u64;
        for (s, entry) in index.shards().iter().enumerate() {
            let raw = load_raw_shard(&dir, entry);
            let view = ShardView::new(entry, &raw).unwrap();
            for i in 0..entry.samples {
                assert_eq!(index.locate(global), Some((s, i)), "{name} sample {global}");
                let line = &lines[global as usize];
                let expected: Value = serde_json::from_str(line).unwrap();
                let cols = view.columns(i).unwrap();
                assert_eq!(cols.len(), expected.as_object().unwrap().len());
                for (col, bytes) in entry.columns.iter().zip(cols) {
                    let exp = &expected[&col.name];
                    assert_eq!(
                        bytes,
                        &b64(exp["raw"].as_str().unwrap())[..],
                        "{name} sample {global} column {}",
                        col.name
                    );
                    let rendered = mds::render(&col.encoding, bytes).unwrap_or_else(|e| {
                        panic!("{name} sample {global} column {}: {e}", col.name)
                    });
                    assert_eq!(
                        mds::rendered_len(&col.encoding, bytes).unwrap(),
                        rendered.len() as u64
                    );
                    // Any window of the file, as FUSE reads it in pieces, is that slice of it.
                    let raw = bytes::Bytes::copy_from_slice(bytes);
                    let n = rendered.len();
                    for (off, len) in [
                        (0, n),
                        (0, 1),
                        (n / 3, n / 2 + 1),
                        (n.saturating_sub(5), 64),
                        (n, 10),
                        (n + 7, 3),
                    ] {
                        let got = mds::render_range(&col.encoding, &raw, off as u64, len).unwrap();
                        let lo = off.min(n);
                        let hi = off.saturating_add(len).min(n);
                        assert_eq!(
                            &got[..],
                            &rendered[lo..hi],
                            "{name} sample {global} column {} window {off}+{len}",
                            col.name
                        );
                    }
                    let enc = col.encoding.to_string();
                    let enc = if enc.starts_with("ndarray") {
                        "ndarray"
                    } else {
                        &enc
                    };
                    check_value(enc, bytes, &rendered, &exp["value"], line);
                    checked_values += 1;
                }
                global += 1;
            }
        }
        assert_eq!(index.locate(global), None);
    }
    assert!(checked_values > 10_000, "{checked_values}");
}

#[test]
fn edge_dataset_lists_every_hash_and_an_empty_shard() {
    let dir = fixtures().join("mds/edge");
    let index = Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    assert_eq!(index.shards()[0].samples, 0);
    let hashes = &index.shards()[1].raw.hashes;
    assert_eq!(hashes.len(), mds::HASH_ALGOS.len());
    let bytes = std::fs::read(dir.join(&index.shards()[1].raw.basename)).unwrap();
    for (algo, digest) in hashes {
        assert_eq!(&mds::hash_hex(algo, &bytes).unwrap(), digest, "{algo}");
    }
}

#[test]
fn merged_indexes_use_subfolder_basenames() {
    for name in ["merged", "merged-compressed"] {
        let dir = fixtures().join("mds").join(name);
        let index = Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        assert!(index.shards().iter().all(|s| s.raw.basename.contains('/')));
        assert!(index.uniform_columns());
    }
}

#[test]
fn extensions_follow_the_design_table() {
    let ext = |e: &str| mds::extension(&e.parse().unwrap());
    let table = [
        ("jpeg", "jpg"),
        ("png", "png"),
        ("str", "txt"),
        ("str_int", "txt"),
        ("str_float", "txt"),
        ("str_decimal", "txt"),
        ("int", "txt"),
        ("float16", "txt"),
        ("uint64", "txt"),
        ("json", "json"),
        ("ndarray", "npy"),
        ("ndarray:uint8:2,3", "npy"),
        ("pil", "npy"),
        ("pkl", "pkl"),
        ("bytes", "bin"),
        ("jpeg_array", "tar"),
        ("list[pil]", "tar"),
    ];
    for (enc, want) in table {
        assert_eq!(ext(enc), want, "{enc}");
    }
}

/// numpy itself loads our `.npy` files and sees the fixture values.
#[test]
fn numpy_loads_rendered_npy() {
    let python = crate::common::python_with_numpy();
    let dir = fixtures().join("mds/encodings");
    let index = Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let entry = &index.shards()[0];
    let raw = load_raw_shard(&dir, entry);
    let view = ShardView::new(entry, &raw).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut cases = Vec::new();
    let lines: Vec<Value> = std::fs::read_to_string(dir.join("expected.jsonl"))
        .unwrap()
        .lines()
        .take(entry.samples as usize)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for i in 0..entry.samples.min(12) {
        let cols = view.columns(i).unwrap();
        for (col, bytes) in entry.columns.iter().zip(cols) {
            if mds::extension(&col.encoding) != "npy" {
                continue;
            }
            let path = tmp.path().join(format!("{i}.{}.npy", col.name));
            std::fs::write(&path, mds::render(&col.encoding, bytes).unwrap()).unwrap();
            cases.push(serde_json::json!({
                "path": path, "value": lines[i as usize][&col.name]["value"],
            }));
        }
    }
    let cases_path = tmp.path().join("cases.json");
    std::fs::write(&cases_path, serde_json::to_vec(&cases).unwrap()).unwrap();
    let script = r#"
import base64, json, sys
import numpy as np
cases = json.load(open(sys.argv[1]))
for c in cases:
    a = np.load(c["path"], allow_pickle=False)
    v = c["value"]
    data = base64.b64decode(v["b64"])
    if "dtype" in v:
        assert a.dtype == np.dtype(v["dtype"]), (c["path"], a.dtype)
        assert list(a.shape) == v["shape"], c["path"]
        assert a.tobytes() == data, c["path"]
    else:
        w, h = v["size"]
        assert a.shape[:2] == (h, w), (c["path"], a.shape)
        if v["mode"] == "1":
            assert a.dtype == np.bool_
            assert np.array_equal(a[:, :, 0], np.unpackbits(np.frombuffer(data, np.uint8).reshape(h, -1), axis=1)[:, :w].astype(bool))
        else:
            assert a.tobytes() == data, c["path"]
print(len(cases))
"#;
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&cases_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "numpy check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(n >= 24, "{n} npy files checked");
}
