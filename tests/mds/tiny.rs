//! `examples/tiny`, the dataset the README runs: it parses, every column renders, and
//! `examples/make_tiny.rs` still regenerates exactly the committed bytes.

use shardfs::mds::{self, Index, ShardView};
use std::path::PathBuf;

#[path = "../../examples/make_tiny.rs"]
mod make_tiny;

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/tiny")
}

#[test]
fn tiny_parses_and_renders() {
    let dir = tiny();
    let index = Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    assert_eq!(index.num_samples(), make_tiny::SAMPLES as u64);
    assert!(index.shards().len() >= 2);
    let mut ids = Vec::new();
    for entry in index.shards() {
        let raw = std::fs::read(dir.join(&entry.raw.basename)).unwrap();
        mds::verify_hashes(&entry.raw, &raw).unwrap();
        let view = ShardView::new(entry, &raw).unwrap();
        for i in 0..entry.samples {
            for (col, bytes) in entry.columns.iter().zip(view.columns(i).unwrap()) {
                let out = mds::render(&col.encoding, bytes).unwrap();
                if col.name == "id" {
                    ids.push(std::str::from_utf8(&out).unwrap().parse::<i64>().unwrap());
                }
                if col.name == "image" {
                    assert!(out.starts_with(b"\xFF\xD8\xFF\xE0") && out.ends_with(b"\xFF\xD9"));
                }
                if col.name == "mask" {
                    assert!(out.starts_with(b"\x89PNG\r\n\x1a\n"));
                }
            }
        }
    }
    assert_eq!(ids, (0..make_tiny::SAMPLES).collect::<Vec<_>>());
    let total: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total < 100 * 1024, "{total} bytes");
}

#[test]
fn make_tiny_regenerates_the_committed_bytes() {
    let dir = tiny();
    let ds = make_tiny::build();
    assert_eq!(
        std::fs::read(dir.join("index.json")).unwrap(),
        ds.index_json
    );
    for f in &ds.files {
        assert_eq!(
            std::fs::read(dir.join(&f.basename)).unwrap(),
            f.data,
            "{}",
            f.basename
        );
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), ds.files.len() + 1);
}
