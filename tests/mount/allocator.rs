//! The daemon's allocator settings: glibc builds re-execute the mount with per-thread malloc
//! caches off, unless the user set allocator variables.

use super::Mount;
use crate::common::fixtures;

/// The environment of the process serving `m`, as `NAME=value` strings.
fn daemon_env(m: &Mount) -> Vec<String> {
    let pid = m.status()["pid"].as_u64().unwrap();
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap()
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

#[test]
#[cfg(target_env = "gnu")]
fn the_daemon_runs_without_per_thread_malloc_caches() {
    let m = Mount::new(fixtures().join("mds/basic").to_str().unwrap(), &[]);
    let env = daemon_env(&m);
    assert!(
        env.iter()
            .any(|v| v == "GLIBC_TUNABLES=glibc.malloc.tcache_count=0"),
        "{env:?}"
    );
    // It serves as usual after the re-exec.
    assert!(!m.list("rank-0/epoch-0").is_empty());
    assert_eq!(
        m.status()["memory"]["threads"].as_u64().map(|t| t > 1),
        Some(true)
    );
}

#[test]
fn allocator_variables_of_the_user_are_kept() {
    let m = Mount::with_env(
        fixtures().join("mds/basic").to_str().unwrap(),
        &[],
        &[("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")],
    );
    let env = daemon_env(&m);
    assert!(
        env.iter()
            .any(|v| v == "GLIBC_TUNABLES=glibc.malloc.arena_max=2"),
        "{env:?}"
    );
    assert!(
        !env.iter().any(|v| v.starts_with("SHARDFS_MALLOC_TUNED=")),
        "{env:?}"
    );
    assert!(!m.list("rank-0/epoch-0").is_empty());
}
