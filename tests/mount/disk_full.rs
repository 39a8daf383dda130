//! A full cache disk (a tiny tmpfs as `--cache-dir`): reads degrade to memory or to ENOSPC with
//! a clear log line, never to wrong bytes, and the cache works again once space returns.

use super::{bin, drop_cached_pages, Expected};
use crate::common::fixtures;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A foreground mount whose cache folder is a tmpfs of `size`; its log goes to a file
/// outside that tmpfs (the disk under test cannot hold it).
struct FullDiskMount {
    dir: tempfile::TempDir,
    mnt: PathBuf,
    cache: PathBuf,
    child: Child,
}

impl FullDiskMount {
    fn new(dataset: &Path, size: &str, extra: &[&str]) -> FullDiskMount {
        let dir = tempfile::tempdir().unwrap();
        let (mnt, cache) = (dir.path().join("mnt"), dir.path().join("cache"));
        std::fs::create_dir(&mnt).unwrap();
        std::fs::create_dir(&cache).unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&cache)
            .status()
            .unwrap()
            .success();
        assert!(ok, "this test needs root to mount a tmpfs");
        let log = std::fs::File::create(dir.path().join("mount.log")).unwrap();
        let child = Command::new(bin())
            .arg("mount")
            .arg(dataset)
            .arg(&mnt)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--foreground", "--log-level", "info"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let m = FullDiskMount {
            dir,
            mnt,
            cache,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !m.mnt.join(".shardfs/status.json").exists() {
            assert!(
                Instant::now() < deadline,
                "mount did not come up: {}",
                m.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mount.log")).unwrap_or_default()
    }

    fn status(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.mnt.join(".shardfs/status.json")).unwrap())
            .unwrap()
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.cache)
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount of the cache tmpfs failed");
    }
}

impl Drop for FullDiskMount {
    fn drop(&mut self) {
        let _ = Command::new(bin()).arg("unmount").arg(&self.mnt).status();
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(&self.mnt)
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.cache).status();
    }
}

/// Every file of rank 0's `epoch` folder equals the reference rendering (one rank, no
/// shuffle: position p holds sample p).
///
/// A sample is one inode in every epoch, so a later epoch would come from the page cache:
/// `uncached` drops each file's cached pages first, so the read reaches the daemon.
fn check_epoch(m: &FullDiskMount, exp: &Expected, epoch: u32, uncached: bool) {
    for g in 0..exp.samples.len() as u64 {
        for (suffix, bytes) in exp.files(g) {
            let p = m.mnt.join(format!("rank-0/epoch-{epoch}/{g:08}.{suffix}"));
            if uncached {
                drop_cached_pages(&p);
            }
            let got =
                std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}\n{}", p.display(), m.log()));
            assert_eq!(got, bytes, "{}", p.display());
        }
    }
}

#[test]
fn a_full_cache_disk_serves_verified_shards_from_memory_and_recovers() {
    let dir = fixtures().join("mds/compressed-zstd");
    let exp = Expected::load(&dir);
    // Two pages: not one decompressed 16 KB shard fits.
    let m = FullDiskMount::new(&dir, "8k", &["--epochs", "2"]);
    check_epoch(&m, &exp, 0, false);
    let s = m.status();
    let cache = &s["cache"][0];
    assert!(cache["disk_write_failures"].as_u64().unwrap() > 0, "{s}");
    let log = m.log();
    assert!(
        log.contains("cannot write to the cache disk") && log.contains("No space left"),
        "{log}"
    );
    // Space returns: the cache fills again (readahead and reads of the next epoch).
    m.resize("16m");
    check_epoch(&m, &exp, 1, true);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = m.status();
        if s["cache"][0]["resident_shards"].as_u64().unwrap() > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cache never filled again: {s}\n{}",
            m.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(m.status()["errors"]["count"], 0);
}

#[test]
fn a_full_cache_disk_without_memory_is_enospc_until_space_returns() {
    let dir = fixtures().join("mds/compressed-zstd");
    let exp = Expected::load(&dir);
    let m = FullDiskMount::new(&dir, "8k", &["--memory-limit", "0"]);
    let (suffix, bytes) = exp.files(0).remove(0);
    let p = m.mnt.join(format!("rank-0/epoch-0/00000000.{suffix}"));
    let e = std::fs::read(&p).unwrap_err();
    // Nothing else can serve the shard: the reader is told the disk is full.
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    let log = m.log();
    assert!(log.contains("No space left"), "{log}");
    assert!(m.status()["errors"]["count"].as_u64().unwrap() > 0);
    // Nothing poisoned: with space back, the same file reads.
    m.resize("16m");
    assert_eq!(std::fs::read(&p).unwrap(), bytes);
    assert!(m.status()["cache"][0]["resident_shards"].as_u64().unwrap() > 0);
}
