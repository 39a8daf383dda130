//! `shardfs-testkit`: what the tests and the benchmarks of shardfs share, in one dev-only
//! place, so neither includes the other's files.
//!
//! - [`s3`]: the loopback S3 server (on the `s3s` crate, SigV4 checked), run in process by
//!   the tests ([`s3::FakeS3`]) and as the `bench-s3-server` example by the benchmarks.
//!
//! It does not depend on shardfs (a dev-dependency that did would give the tests a second
//! copy of shardfs's types); the test doubles of shardfs's `Store` live in `tests/common/`.

pub mod s3;

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
