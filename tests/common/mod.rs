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
pub mod stores;
// The loopback S3 server (run in process by the tests, as `bench-s3-server` by the benchmarks)
// is in the dev-only test kit, `shardfs_testkit::s3`.

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

pub use shardfs_testkit::files_under;

/// Store options that reach a [`FakeS3`](shardfs_testkit::s3::FakeS3) with its credentials.
pub trait FakeS3Options {
    /// The options (endpoint, region, credentials, quick retries).
    fn options(&self) -> shardfs::store::StoreOptions;
}

impl FakeS3Options for shardfs_testkit::s3::FakeS3 {
    fn options(&self) -> shardfs::store::StoreOptions {
        let mut o = moto::s3_options(&self.endpoint);
        o.credentials = Some(shardfs::store::StaticCredentials {
            access_key_id: shardfs_testkit::s3::ACCESS_KEY.into(),
            secret_access_key: shardfs_testkit::s3::SECRET_KEY.into(),
            session_token: None,
        });
        o
    }
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
