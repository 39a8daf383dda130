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

/// Path of the `shardfs` binary built for these tests.
pub fn shardfs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_shardfs"))
}
