//! Helpers shared by the integration tests: where the fixtures live, the built binary.
#![allow(dead_code)]

use std::path::PathBuf;

/// The shared fixtures folder (`../shared/fixtures` beside the repository), or `SHARDFS_FIXTURES`.
pub fn fixtures() -> PathBuf {
    if let Ok(p) = std::env::var("SHARDFS_FIXTURES") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    assert!(
        p.is_dir(),
        "fixtures not found at {} (set SHARDFS_FIXTURES)",
        p.display()
    );
    p
}

/// Path of the `shardfs` binary built for these tests, or `SHARDFS_BIN` (useful when a
/// shared target folder may hold another checkout's build).
pub fn shardfs_bin() -> PathBuf {
    std::env::var_os("SHARDFS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_shardfs")))
}

pub mod moto;
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
