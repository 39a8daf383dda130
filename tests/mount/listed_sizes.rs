//! A cold rank folder's listing gives the files its shards' headers size (a column that is
//! its samples' only variable-size one, stored as is) their sizes, from two ranged GETs per
//! header through a real S3 server, without downloading a shard; the kernel then opens those
//! files without a lookup, and the sizes match the bytes read.

use std::process::Command;

use super::{bin, fake_s3_env, shards_fetched, succeeded, Mount};
use shardfs_testkit::s3::FakeS3;

#[test]
fn a_cold_listing_sizes_files_from_shard_headers_without_downloading_shards() {
    // An image column (the only variable-size one) and an integer label, in small shards.
    let packed = tempfile::tempdir().unwrap();
    let input =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pack/inputs/imagefolder");
    succeeded(
        Command::new(bin())
            .arg("pack")
            .arg(&input)
            .arg(packed.path())
            .args(["--columns", "image:jpeg,label:int", "--size-limit", "4096"]),
    );
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(packed.path().join("index.json")).unwrap()).unwrap();
    let shards = index["shards"].as_array().unwrap().len();
    assert!(shards > 1, "{shards} shards");

    let server = FakeS3::start();
    server.put_dir("bkt", "ds", packed.path());
    let m = Mount::with_env(
        "s3://bkt/ds",
        &["--endpoint-url", &server.endpoint],
        &fake_s3_env(),
    );
    let names = m.list("rank-0/epoch-0");
    let images: Vec<&String> = names.iter().filter(|n| n.ends_with(".jpg")).collect();
    let labels = names.iter().filter(|n| n.ends_with(".txt")).count();
    assert_eq!(images.len() + labels, names.len(), "{names:?}");

    let s = m.status();
    assert_eq!(s["listed_files"]["with_size"], images.len() as u64, "{s}");
    assert_eq!(s["listed_files"]["without_size"], labels as u64, "{s}");
    // Headers only: no shard was downloaded for the listing.
    assert_eq!(shards_fetched(&s), 0, "{s}");

    // The sizes the listing gave are the files' real sizes.
    let epoch = m.mnt.join("rank-0/epoch-0");
    for n in &names {
        let size = std::fs::metadata(epoch.join(n)).unwrap().len();
        let bytes = std::fs::read(epoch.join(n)).unwrap();
        assert_eq!(size, bytes.len() as u64, "{n}");
        assert!(!bytes.is_empty(), "{n}");
    }
    let s = m.status();
    assert_eq!(s["errors"]["count"], 0, "{s}");
}
