//! Helpers shared by the integration tests: where the fixtures live, the built binary.
#![allow(dead_code)]

use std::path::PathBuf;

/// The MDS fixtures written by mosaicml-streaming 0.13 (`tests/fixtures/` of the repository),
/// or `SHARDFS_FIXTURES`.
pub fn fixtures() -> PathBuf {
    if let Ok(p) = std::env::var("SHARDFS_FIXTURES") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    assert!(
        p.join("MANIFEST.json").is_file(),
        "fixtures not found at {} (they are part of the repository; set SHARDFS_FIXTURES to use others)",
        p.display()
    );
    p
}

/// A Python interpreter with numpy and boto3: `SHARDFS_PYTHON`, else `python3` when it has
/// both. Panics (the test fails, it does not skip) when there is none: `tests/run.sh`
/// prepares one.
pub fn python_with_numpy() -> String {
    static PY: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    PY.get_or_init(|| {
        let py = std::env::var("SHARDFS_PYTHON").unwrap_or_else(|_| "python3".into());
        let ok = std::process::Command::new(&py)
            .args(["-c", "import numpy, boto3"])
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            Ok(py)
        } else {
            Err(format!(
                "no Python with numpy and boto3 ({py}): run the tests with `bash tests/run.sh`, \
                 which prepares one, or set SHARDFS_PYTHON"
            ))
        }
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Path of the `shardfs` binary built for these tests, or `SHARDFS_BIN` (useful when a
/// shared target folder may hold another checkout's build).
pub fn shardfs_bin() -> PathBuf {
    std::env::var_os("SHARDFS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_shardfs")))
}

pub mod emulators;
pub mod moto;
// The S3 server of the benchmarks (bench/s3_server/), run in process by `s3s_server`.
#[path = "../../bench/s3_server/mod.rs"]
pub mod loopback_s3;
pub mod s3s_server;

/// Every fixture dataset folder under `fixtures()/mds`, sorted by name.
pub fn mds_datasets() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures().join("mds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("index.json").is_file())
        .collect();
    v.sort();
    v
}

/// Every regular file under `dir`, as paths relative to it with `/` separators, sorted.
pub fn files_under(dir: &std::path::Path) -> Vec<String> {
    fn walk(root: &std::path::Path, d: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Removes every hash from a parsed index.json, as MDSWriter's default `hashes=[]` writes it.
pub fn strip_hashes(index: &mut serde_json::Value) {
    for shard in index["shards"].as_array_mut().unwrap() {
        shard["hashes"] = serde_json::json!([]);
        for file in ["raw_data", "zip_data"] {
            if shard[file].is_object() {
                shard[file]["hashes"] = serde_json::json!({});
            }
        }
    }
}
