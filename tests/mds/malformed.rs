//! The malformed-input corpus (`tests/malformed/`, written by its `make.py`): every broken
//! `index.json` and shard file gives one clear error, on one line, that says what is wrong
//! (the substrings in `cases.json`), and nothing panics. Each case runs twice: through the
//! library path the mount uses (index parse, or shard download, verification, decompression,
//! header check and rendering of every column of every sample) and through `shardfs cat`.

use crate::common::{fixtures, shardfs_bin};
use serde_json::Value;
use shardfs::cache::Dataset;
use shardfs::mds::{self, Index, ShardView};
use shardfs::store::{self, BlockingStore, StoreOptions};
use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/malformed")
}

struct Case {
    file: String,
    parse: Option<String>,
    cat: String,
    sample: u64,
    column: String,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(corpus().join("cases.json")).unwrap();
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    cases
        .iter()
        .map(|c| Case {
            file: c["file"].as_str().unwrap().to_string(),
            parse: c["parse"].as_str().map(str::to_string),
            cat: c["cat"].as_str().unwrap().to_string(),
            sample: c["sample"].as_u64().unwrap(),
            column: c["column"].as_str().unwrap().to_string(),
        })
        .collect()
}

/// A copy of the fixture dataset the case breaks, without hashes in its index (as MDSWriter
/// writes by default, so the parsers rather than a hash see the damage), with the case's file
/// in place of the original.
fn dataset_with(case: &Case, into: &Path) -> PathBuf {
    let (fixture, replaces) = if case.file.starts_with("index/") {
        ("basic", "index.json")
    } else if case.file.ends_with(".zstd") {
        ("compressed-zstd", "shard.00000.mds.zstd")
    } else {
        ("basic", "shard.00000.mds")
    };
    let from = fixtures().join("mds").join(fixture);
    let to = into.join("ds");
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(&from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    let mut index: Value =
        serde_json::from_slice(&std::fs::read(to.join("index.json")).unwrap()).unwrap();
    crate::common::strip_hashes(&mut index);
    std::fs::write(to.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    std::fs::copy(corpus().join(&case.file), to.join(replaces)).unwrap();
    to
}

/// What the mount's path makes of the case: the first error, as the user would see it.
fn library_error(case: &Case, ds: &Path) -> Option<String> {
    if case.file.starts_with("index/") {
        let bytes = std::fs::read(ds.join("index.json")).unwrap();
        return Index::parse(&bytes).err().map(|e| e.to_string());
    }
    let src = ds.to_str().unwrap();
    let bs = BlockingStore::new(store::open(src, &StoreOptions::default()).unwrap(), 1).unwrap();
    let dataset = Dataset::from_store(bs, src).unwrap();
    let raw = match dataset.fetcher().fetch_shard(0, 1) {
        Ok(raw) => raw,
        Err(e) => return Some(e.to_string()),
    };
    let entry = &dataset.index().shards()[0];
    let view = match ShardView::new(entry, &raw) {
        Ok(v) => v,
        Err(e) => return Some(e.to_string()),
    };
    for i in 0..entry.samples {
        let cols = match view.columns(i) {
            Ok(c) => c,
            Err(e) => return Some(e.to_string()),
        };
        for (col, bytes) in entry.columns.iter().zip(cols) {
            if let Err(e) = mds::render(&col.encoding, bytes) {
                return Some(e.to_string());
            }
        }
    }
    None
}

#[test]
fn the_corpus_is_large_and_every_file_is_a_case() {
    let cases = cases();
    let index = cases
        .iter()
        .filter(|c| c.file.starts_with("index/"))
        .count();
    let shard = cases
        .iter()
        .filter(|c| c.file.starts_with("shard/"))
        .count();
    assert!(
        index >= 20 && shard >= 10,
        "{index} index cases, {shard} shard cases"
    );
    let mut on_disk = Vec::new();
    for sub in ["index", "shard"] {
        for e in std::fs::read_dir(corpus().join(sub)).unwrap() {
            on_disk.push(format!(
                "{sub}/{}",
                e.unwrap().file_name().to_str().unwrap()
            ));
        }
    }
    on_disk.sort();
    let mut listed: Vec<String> = cases.iter().map(|c| c.file.clone()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

#[test]
fn every_malformed_file_is_one_clear_error_on_the_library_path() {
    let mut failures = Vec::new();
    for case in cases() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset_with(&case, tmp.path());
        let got = library_error(&case, &ds);
        let ok = match (&case.parse, &got) {
            (None, None) => true,
            (Some(want), Some(e)) => e.contains(want.as_str()) && !e.contains('\n'),
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "{}: want {:?}, got {:?}",
                case.file, case.parse, got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_malformed_file_is_one_clear_line_from_shardfs_cat() {
    let mut failures = Vec::new();
    for case in cases() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset_with(&case, tmp.path());
        let out = std::process::Command::new(shardfs_bin())
            .arg("cat")
            .arg(&ds)
            .arg(case.sample.to_string())
            .args(["--column", &case.column])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        let ok = !out.status.success()
            && out.status.code().is_some()
            && out.stdout.is_empty()
            && err.trim_end().lines().count() == 1
            && err.contains(&case.cat)
            && !err.contains("panicked");
        if !ok {
            failures.push(format!(
                "{}: want {:?}, exit {:?}, stderr {err:?}",
                case.file, case.cat, out.status
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
