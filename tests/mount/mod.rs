//! Real FUSE mounts through the `shardfs` binary, checked against the fixtures.

mod allocator;
mod disk_full;
mod errnos;
mod issue38;
mod landed_push;
mod listed_sizes;
mod metrics;
mod orders;
mod page_push;
mod status;
mod waiting;

use crate::common::{fixtures, shardfs_bin};
use base64::Engine;
use shardfs::mds;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A private copy of the binary: the shared target folder's copy can be replaced by another
/// build while tests run.
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // A static is never dropped, so each test process leaves its copy (~260 MB in a debug
        // build): remove those of processes that are gone.
        if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(pid) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("shardfs-test-bin-"))
                else {
                    continue;
                };
                if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = std::env::temp_dir().join(format!("shardfs-test-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("shardfs");
        let from = std::env::var_os("SHARDFS_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(shardfs_bin);
        std::fs::copy(from, &p).unwrap();
        p
    })
}

/// The daemon's environment for a mount of the loopback S3 test server (its credentials and
/// region: the AWS chain then never asks the instance-metadata address).
pub fn fake_s3_env() -> [(&'static str, &'static str); 3] {
    use shardfs_testkit::s3::{ACCESS_KEY, SECRET_KEY};
    [
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_REGION", "us-east-1"),
    ]
}

/// A background mount in a temporary folder, unmounted on drop.
pub struct Mount {
    pub mnt: PathBuf,
    _dir: tempfile::TempDir,
    pub cache: PathBuf,
}

impl Mount {
    /// `shardfs mount SOURCE MNT extra...` in background mode (returns once it answers).
    pub fn new(source: &str, extra: &[&str]) -> Mount {
        Self::with_env(source, extra, &[])
    }

    /// [`Mount::new`] with extra environment variables for the daemon.
    pub fn with_env(source: &str, extra: &[&str], env: &[(&str, &str)]) -> Mount {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        let cache = dir.path().join("cache");
        std::fs::create_dir(&mnt).unwrap();
        let mut args: Vec<String> = vec!["mount".into()];
        if !source.is_empty() {
            args.push(source.into());
        }
        args.push(mnt.to_str().unwrap().into());
        args.push("--cache-dir".into());
        args.push(cache.to_str().unwrap().into());
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut cmd = Command::new(bin());
        cmd.args(&args).env_remove("AWS_CA_BUNDLE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "shardfs {args:?} failed: {}\nlog: {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(cache.join("shardfs.log")).unwrap_or_default()
        );
        Mount {
            mnt,
            _dir: dir,
            cache,
        }
    }

    /// The live status.json.
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.mnt.join(".shardfs/status.json")).unwrap())
            .unwrap()
    }

    /// Sorted names in `rel`.
    pub fn list(&self, rel: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.mnt.join(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    /// Resident memory of the serving process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let pid = self.status()["pid"].as_u64().unwrap();
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let pid = std::fs::read(self.mnt.join(".shardfs/status.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["pid"].as_u64());
        let mounted = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|m| m.contains(self.mnt.to_str().unwrap_or("")))
            .unwrap_or(false);
        if !mounted {
            return;
        }
        let ok = Command::new(bin())
            .arg("unmount")
            .arg(&self.mnt)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.mnt)
                .status();
        }
        if let Some(pid) = pid {
            for _ in 0..200 {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// One fixture dataset: its index and, per sample, column name → raw bytes.
pub struct Expected {
    pub index: mds::Index,
    pub samples: Vec<BTreeMap<String, Vec<u8>>>,
}

impl Expected {
    pub fn load(dir: &Path) -> Expected {
        let index = mds::Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD;
        let samples = std::fs::read_to_string(dir.join("expected.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, c)| (k.clone(), b64.decode(c["raw"].as_str().unwrap()).unwrap()))
                    .collect()
            })
            .collect();
        Expected { index, samples }
    }

    /// (file suffix, rendered bytes) of every column of global sample `g`, from the reference
    /// raw bytes.
    pub fn files(&self, g: u64) -> Vec<(String, Vec<u8>)> {
        let (shard, _) = self.index.locate(g).unwrap();
        self.index.shards()[shard]
            .columns
            .iter()
            .map(|c| {
                let raw = &self.samples[g as usize][&c.name];
                let bytes = mds::render(&c.encoding, raw).unwrap().into_owned();
                (format!("{}.{}", c.name, mds::extension(&c.encoding)), bytes)
            })
            .collect()
    }
}

/// Drops the kernel's cached pages of one file (`POSIX_FADV_DONTNEED`), so the next read of
/// it reaches the filesystem.
pub fn drop_cached_pages(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: a valid open descriptor; advice only, no memory is handed over.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise({})", path.display());
}

fn mds_datasets() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures().join("mds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("index.json").is_file() && p.join("expected.jsonl").is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn every_fixture_reads_back_through_samples_and_rank_folders() {
    for dir in mds_datasets() {
        let exp = Expected::load(&dir);
        let m = Mount::new(dir.to_str().unwrap(), &[]);
        assert_eq!(
            std::fs::read(m.mnt.join("index.json")).unwrap(),
            std::fs::read(dir.join("index.json")).unwrap()
        );
        let n = exp.samples.len() as u64;
        let mut expected_names = Vec::new();
        for g in 0..n {
            for (suffix, bytes) in exp.files(g) {
                let name = format!("{g:08}.{suffix}");
                let p = m.mnt.join("samples").join(&name);
                assert_eq!(
                    std::fs::metadata(&p).unwrap().len(),
                    bytes.len() as u64,
                    "{} size of {name}",
                    dir.display()
                );
                assert_eq!(
                    std::fs::read(&p).unwrap(),
                    bytes,
                    "{} {name}",
                    dir.display()
                );
                // One rank, no shuffle: position p holds sample p.
                assert_eq!(
                    std::fs::read(m.mnt.join("rank-0/epoch-0").join(&name)).unwrap(),
                    bytes
                );
                expected_names.push(name);
            }
        }
        expected_names.sort();
        assert_eq!(m.list("samples"), expected_names, "{}", dir.display());
        assert_eq!(m.list("rank-0/epoch-0"), expected_names);
        assert_eq!(m.status()["errors"]["count"], 0);
    }
}

#[test]
fn mount_is_read_only_and_missing_names_are_enoent() {
    let dir = fixtures().join("mds/basic");
    let m = Mount::new(dir.to_str().unwrap(), &[]);
    let e = std::fs::write(m.mnt.join("samples/00000000.id.txt"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let e = std::fs::create_dir(m.mnt.join("new")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let e = std::fs::read(m.mnt.join("samples/00001000.id.txt")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let e = std::fs::read(m.mnt.join("rank-1")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(m.list(""), [".shardfs", "index.json", "rank-0", "samples"]);
    assert_eq!(m.list(".shardfs"), ["status.json"]);
}

#[test]
fn clear_errors_before_mounting() {
    let fail = |args: &[&str]| {
        let out = Command::new(bin()).args(args).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let tmp = tempfile::tempdir().unwrap();
    let basic = fixtures().join("mds/basic");
    let err = fail(&["mount", basic.to_str().unwrap(), "/nonexistent/mnt"]);
    assert!(err.contains("does not exist"), "{err}");
    let err = fail(&[
        "mount",
        "/nonexistent/dataset",
        tmp.path().to_str().unwrap(),
    ]);
    assert!(err.contains("index.json"), "{err}");
    let m = Mount::new(basic.to_str().unwrap(), &[]);
    let err = fail(&["mount", basic.to_str().unwrap(), m.mnt.to_str().unwrap()]);
    assert!(err.contains("busy"), "{err}");
}

#[test]
fn shard_failure_is_eio_for_its_files_only_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("mds/basic");
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    // Corrupt shard 1: its hash no longer matches.
    let bad = tmp.path().join("shard.00001.mds");
    let mut b = std::fs::read(&bad).unwrap();
    let last = b.len() - 1;
    b[last] ^= 0xff;
    std::fs::write(&bad, b).unwrap();
    let exp = Expected::load(&src);
    let m = Mount::new(tmp.path().to_str().unwrap(), &[]);
    let first_of_1 = exp.index.shard_start(1).unwrap();
    let e = std::fs::read(m.mnt.join(format!("samples/{first_of_1:08}.id.txt"))).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert_eq!(
        std::fs::read(m.mnt.join("samples/00000000.id.txt")).unwrap(),
        exp.files(0)[1].1
    );
    let s = m.status();
    assert!(s["errors"]["count"].as_u64().unwrap() >= 1);
    assert_eq!(s["errors"]["recent"][0]["shard"], "shard.00001.mds", "{s}");
    // One log line names the store, the shard and the reason.
    let store = s["errors"]["recent"][0]["store"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        store.starts_with("file://") && store.contains(tmp.path().to_str().unwrap()),
        "{s}"
    );
    let log = std::fs::read_to_string(m.cache.join("shardfs.log")).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("shard unavailable"))
        .unwrap_or_else(|| panic!("no error line in {log}"));
    assert!(
        line.contains(&store) && line.contains("shard.00001.mds") && line.contains("hash"),
        "{line}"
    );
}

#[test]
fn python_reads_a_rank_folder_like_a_dataloader() {
    let dir = fixtures().join("mds/basic");
    let exp = Expected::load(&dir);
    let m = Mount::new(dir.to_str().unwrap(), &[]);
    let script = r#"
import hashlib, json, os, sys
root = sys.argv[1]
names = sorted(os.listdir(root))
out = {}
for name in names:
    with open(os.path.join(root, name), "rb") as f:
        out[name] = hashlib.sha256(f.read()).hexdigest()
print(json.dumps(out))
"#;
    let python = crate::common::python_with_numpy();
    let out = succeeded(
        Command::new(python)
            .arg("-c")
            .arg(script)
            .arg(m.mnt.join("rank-0/epoch-0")),
    );
    let got: BTreeMap<String, String> = serde_json::from_slice(&out.stdout).unwrap();
    use sha2::Digest;
    let mut want = BTreeMap::new();
    for g in 0..exp.samples.len() as u64 {
        for (suffix, bytes) in exp.files(g) {
            want.insert(
                format!("{g:08}.{suffix}"),
                hex::encode(sha2::Sha256::digest(&bytes)),
            );
        }
    }
    assert_eq!(got, want);
}

/// Sends `sig` to the daemon `pid` this test started and waits up to 3 s for it to be gone.
fn signal_and_wait(pid: u64, sig: libc::c_int) {
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
    for _ in 0..300 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn unmount_command_and_sigterm_end_the_daemon() {
    let dir = fixtures().join("mds/basic");
    let m = Mount::new(dir.to_str().unwrap(), &[]);
    let pid = m.status()["pid"].as_u64().unwrap();
    signal_and_wait(pid, libc::SIGTERM);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "daemon still running after SIGTERM"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(m.mnt.to_str().unwrap()),
        "still mounted after SIGTERM"
    );
}

#[test]
fn unmount_waits_for_the_daemon_and_reports_how_it_ended() {
    let dir = fixtures().join("mds/basic");
    // A clean end: when `shardfs unmount` returns, the daemon has already exited.
    let m = Mount::new(dir.to_str().unwrap(), &[]);
    let pid = m.status()["pid"].as_u64().unwrap();
    let out = Command::new(bin())
        .arg("unmount")
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Exited means gone or a zombie waiting for whoever adopted it to reap it.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(") ").next().and_then(|r| r.chars().next());
    assert!(
        matches!(state, None | Some('Z') | Some('X')),
        "shardfs unmount returned while the daemon (pid {pid}) still ran: {stat}"
    );
    // A daemon killed with SIGKILL: the unmount still detaches the dead mount, and says so.
    let m = Mount::new(dir.to_str().unwrap(), &[]);
    let pid = m.status()["pid"].as_u64().unwrap();
    signal_and_wait(pid, libc::SIGKILL);
    let out = Command::new(bin())
        .arg("unmount")
        .arg(&m.mnt)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "unmount of a killed daemon succeeded"
    );
    assert!(err.contains("ended without reporting"), "{err}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(m.mnt.to_str().unwrap()), "still mounted");
}

/// Every rank-folder and samples/ file of `exp` read through `m` equals the reference bytes.
fn check_all_bytes(m: &Mount, exp: &Expected, ranks: &[u64]) {
    for g in 0..exp.samples.len() as u64 {
        for (suffix, bytes) in exp.files(g) {
            assert_eq!(
                std::fs::read(m.mnt.join(format!("samples/{g:08}.{suffix}"))).unwrap(),
                bytes
            );
        }
    }
    for r in ranks {
        let dir = m.mnt.join(format!("rank-{r}/epoch-0"));
        for name in m.list(&format!("rank-{r}/epoch-0")) {
            let data = std::fs::read(dir.join(&name)).unwrap();
            assert_eq!(
                data.len() as u64,
                std::fs::metadata(dir.join(&name)).unwrap().len()
            );
        }
    }
}

/// Bytes of regular files in the cache folder `dir`. A walk is not atomic, so it is ordered to
/// not count more than was there: each `tmp/` folder (fills in progress) before its siblings,
/// each inode once, so a fill renamed from `tmp/` into `shards/` during the walk counts once.
fn disk_usage(dir: &Path) -> u64 {
    let mut seen = std::collections::HashMap::new();
    files_by_inode(dir, &mut seen);
    seen.values().sum()
}

fn files_by_inode(dir: &Path, seen: &mut std::collections::HashMap<(u64, u64), u64>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name() != "tmp");
    for e in entries {
        match e.file_type() {
            Ok(t) if t.is_dir() => files_by_inode(&e.path(), seen),
            Ok(t) if t.is_file() => {
                if let Ok(m) = e.metadata() {
                    seen.insert((m.dev(), m.ino()), m.len());
                }
            }
            _ => {}
        }
    }
}

#[test]
fn cache_limit_smaller_than_the_dataset_keeps_every_byte_right() {
    let dir = fixtures().join("mds/compressed-zstd");
    let exp = Expected::load(&dir);
    let total: u64 = exp.index.shards().iter().map(|s| s.raw.bytes).sum();
    let biggest = exp
        .index
        .shards()
        .iter()
        .map(|s| s.raw.bytes)
        .max()
        .unwrap();
    let limit = (biggest * 2).max(total / 3);
    assert!(limit < total);
    let m = Mount::new(
        dir.to_str().unwrap(),
        &["--cache-limit", &limit.to_string()],
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        let cache = m.cache.clone();
        std::thread::spawn(move || {
            let mut peak = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(disk_usage(&cache));
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            peak
        })
    };
    check_all_bytes(&m, &exp, &[0]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = watcher.join().unwrap();
    let s = m.status();
    // Shard files plus the cache's small bookkeeping files (a few hundred bytes).
    assert!(
        peak <= limit + 4096,
        "disk usage peaked at {peak}, over the limit {limit}"
    );
    assert!(s["cache"][0]["evictions"].as_u64().unwrap() > 0, "{s}");
    assert!(
        s["cache"][0]["usage_bytes"].as_u64().unwrap() <= limit,
        "{s}"
    );
    assert_eq!(s["errors"]["count"], 0);
}

#[test]
fn sixteen_concurrent_readers_over_several_epochs() {
    let dir = fixtures().join("mds/basic");
    let exp = std::sync::Arc::new(Expected::load(&dir));
    let m = Mount::new(dir.to_str().unwrap(), &["--epochs", "4"]);
    assert_eq!(
        m.list("rank-0"),
        ["epoch-0", "epoch-1", "epoch-2", "epoch-3"]
    );
    let rss_before = m.rss_kib();
    let mnt = m.mnt.clone();
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let mnt = mnt.clone();
            let exp = exp.clone();
            std::thread::spawn(move || {
                // Reader t reads epoch t % 5 (epoch 4 is not listed but can be opened) from a
                // different starting point, wrapping around.
                let epoch = t % 5;
                let n = exp.samples.len() as u64;
                let mut read = 0u64;
                for k in 0..n {
                    let g = (k + t * 61) % n;
                    for (suffix, bytes) in exp.files(g) {
                        let p = mnt.join(format!("rank-0/epoch-{epoch}/{g:08}.{suffix}"));
                        assert_eq!(std::fs::read(&p).unwrap(), bytes, "{}", p.display());
                        read += bytes.len() as u64;
                    }
                }
                read
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(total > 0);
    let s = m.status();
    assert_eq!(s["errors"]["count"], 0);
    let rss_after = m.rss_kib();
    assert!(rss_after < 256 * 1024, "RSS {rss_after} KiB");
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
}

/// Runs `cmd` to its end and returns its output, failing the test (with its stderr) if it
/// failed.
pub fn succeeded(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn shards_fetched(s: &serde_json::Value) -> u64 {
    s["cache"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["shards_fetched"].as_u64().unwrap())
        .sum()
}

#[test]
fn a_node_serving_several_ranks_fetches_each_shard_once() {
    let dir = fixtures().join("orders/datasets/main");
    let index = mds::Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let shards = index.shards().len() as u64;
    let m = Mount::new(
        dir.to_str().unwrap(),
        &[
            "--nodes",
            "2",
            "--node-rank",
            "1",
            "--ranks-per-node",
            "4",
            "--workers",
            "2",
            "--batch-size",
            "4",
            "--shuffle",
            "--epochs",
            "2",
        ],
    );
    assert_eq!(
        m.list("").iter().filter(|n| n.starts_with("rank-")).count(),
        4
    );
    // Shards this node's ranks need (one stream: the `idx` column is the global id).
    let mut needed = std::collections::BTreeSet::new();
    for epoch in 0..2 {
        let readers: Vec<_> = (4..8)
            .map(|r| {
                let dir = m.mnt.join(format!("rank-{r}/epoch-{epoch}"));
                std::thread::spawn(move || {
                    let mut names: Vec<_> = std::fs::read_dir(&dir)
                        .unwrap()
                        .map(|e| e.unwrap().path())
                        .collect();
                    names.sort();
                    let mut ids = Vec::new();
                    for p in &names {
                        let data = std::fs::read(p).unwrap();
                        if p.to_str().unwrap().ends_with(".idx.txt") {
                            ids.push(String::from_utf8(data).unwrap().parse::<u64>().unwrap());
                        }
                    }
                    ids
                })
            })
            .collect();
        for r in readers {
            let ids = r.join().unwrap();
            assert!(!ids.is_empty());
            needed.extend(ids.into_iter().map(|g| index.locate(g).unwrap().0));
        }
        let s = m.status();
        assert!(
            (needed.len() as u64) < shards || epoch > 0,
            "node 1 of 2 needs only part of the shards"
        );
        assert_eq!(
            shards_fetched(&s),
            needed.len() as u64,
            "epoch {epoch}: {s}"
        );
    }
    let s = m.status();
    assert_eq!(s["errors"]["count"], 0);
    // A rank's cursor follows the reads that reach the daemon: samples this node already read
    // in epoch 0 come from the page cache in epoch 1 (one inode per sample), so a cursor may
    // stay in epoch 0.
    for r in s["readahead"]["ranks"].as_array().unwrap() {
        assert!(r["bytes_read"].as_u64().unwrap() > 0);
    }
}

#[test]
fn s3_dataset_through_moto_reads_back_and_stats_with_ranged_reads() {
    let moto = crate::common::moto::moto();
    let env = [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    for name in ["basic", "compressed-zstd"] {
        let dir = fixtures().join("mds").join(name);
        moto.upload_dir("mount-tests", &format!("ds/{name}"), &dir);
        let exp = Expected::load(&dir);
        let src = format!("s3://mount-tests/ds/{name}");
        let m = Mount::with_env(&src, &["--endpoint-url", &moto.endpoint], &env);
        if name == "basic" {
            // An uncompressed remote shard: stat costs ranged reads, not a download.
            let (suffix, bytes) = exp.files(500).remove(3);
            let meta = std::fs::metadata(m.mnt.join(format!("samples/00000500.{suffix}"))).unwrap();
            assert_eq!(meta.len(), bytes.len() as u64);
            let s = m.status();
            assert_eq!(shards_fetched(&s), 0, "{s}");
            assert!(
                s["cache"][0]["ranged_fetches"].as_u64().unwrap() >= 1,
                "{s}"
            );
        }
        check_all_bytes(&m, &exp, &[0]);
        for g in 0..exp.samples.len() as u64 {
            for (suffix, bytes) in exp.files(g) {
                assert_eq!(
                    std::fs::read(m.mnt.join(format!("rank-0/epoch-0/{g:08}.{suffix}"))).unwrap(),
                    bytes
                );
            }
        }
        let s = m.status();
        assert_eq!(
            shards_fetched(&s),
            exp.index.shards().len() as u64,
            "each shard fetched once: {s}"
        );
        assert_eq!(s["errors"]["count"], 0);
    }
}

#[test]
fn credentials_never_reach_logs_status_or_error_messages() {
    let moto = crate::common::moto::moto();
    let dir = fixtures().join("mds/basic");
    moto.upload_dir("secret-tests", "ds/basic", &dir);
    let (key_id, secret, token) = (
        "AKIASHARDFSKEYID0001",
        "shardfs+Secret/Value+0123456789abcdef",
        "shardfs-session-token-0123456789",
    );
    let env = [
        ("AWS_ACCESS_KEY_ID", key_id),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("AWS_SESSION_TOKEN", token),
        ("AWS_REGION", "us-east-1"),
        ("RUST_LOG", "trace"),
    ];
    let m = Mount::with_env(
        "s3://secret-tests/ds/basic",
        &["--endpoint-url", &moto.endpoint],
        &env,
    );
    for name in m.list("rank-0/epoch-0").iter().take(20) {
        std::fs::read(m.mnt.join("rank-0/epoch-0").join(name)).unwrap();
    }
    let status = std::fs::read_to_string(m.mnt.join(".shardfs/status.json")).unwrap();
    // An error path too: a dataset that is not there, through the CLI.
    let out = Command::new(bin())
        .args(["inspect", "s3://secret-tests/ds/missing", "--endpoint-url"])
        .arg(&moto.endpoint)
        .envs(env)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let log = std::fs::read_to_string(m.cache.join("shardfs.log")).unwrap();
    assert!(log.len() > 1000, "the trace log is nearly empty: {log}");
    drop(m);
    for (what, text) in [("status.json", &status), ("stderr", &stderr), ("log", &log)] {
        for s in [secret, token] {
            assert!(!text.contains(s), "{what} shows a credential: {text}");
        }
    }
}

#[test]
fn log_format_json_writes_one_object_per_line_to_the_daemon_log() {
    let m = Mount::new(
        fixtures().join("mds/basic").to_str().unwrap(),
        &["--log-format", "json", "--log-level", "info"],
    );
    for name in m.list("rank-0/epoch-0").iter().take(5) {
        std::fs::read(m.mnt.join("rank-0/epoch-0").join(name)).unwrap();
    }
    let log = std::fs::read_to_string(m.cache.join("shardfs.log")).unwrap();
    drop(m);
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "{log}");
    let mut messages = Vec::new();
    for l in lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string(), "{l}");
        messages.push(v["fields"]["message"].as_str().unwrap_or("").to_string());
    }
    assert!(messages.iter().any(|m| m == "mounted"), "{messages:?}");
}

/// The same datasets mounted through the GCS and Azure emulators and over plain HTTP read back
/// byte for byte (every column, compressed shards included), the emulators configured only by
/// each ecosystem's settings.
#[test]
fn gcs_azure_and_http_datasets_read_back_through_their_servers() {
    use crate::common::emulators;
    let moto = crate::common::moto::moto();
    let gcs = emulators::gcs();
    let az = emulators::azurite();
    let host = gcs.endpoint.trim_start_matches("http://").to_string();
    let az_env = az.azure_env();
    for name in ["basic", "compressed-zstd"] {
        let dir = fixtures().join("mds").join(name);
        let exp = Expected::load(&dir);
        let prefix = emulators::dataset_prefix(&dir);
        let gs = Mount::with_env(
            &format!("gs://{}/{prefix}", emulators::BUCKET),
            &["--shuffle"],
            &[("STORAGE_EMULATOR_HOST", host.as_str())],
        );
        check_all_bytes(&gs, &exp, &[0]);
        drop(gs);
        let env: Vec<(&str, &str)> = az_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let azm = Mount::with_env(
            &format!("az://{}/{prefix}", emulators::BUCKET),
            &["--shuffle"],
            &env,
        );
        check_all_bytes(&azm, &exp, &[0]);
        drop(azm);
        moto.upload_dir_public("mount-http", name, &dir);
        let http = Mount::new(
            &format!("{}/mount-http/{name}", moto.endpoint),
            &["--shuffle"],
        );
        check_all_bytes(&http, &exp, &[0]);
    }
}

/// Cached shard files under `dir` (recursively, checksum files left out) whose name contains
/// `part`.
fn cached_files_named(dir: &Path, part: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.file_name().to_string_lossy().contains(part)
                && p.extension()
                    .is_none_or(|x| x != "xxh3" && x != "crc64nvme")
            {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_listing_keeps_the_page_cache_of_files_already_read() {
    // Review finding A4 feared that a READDIRPLUS entry whose size is not known without
    // fetching (it goes out with size 0 and a zero TTL) would make the kernel drop the cached
    // pages of a file it had already read. It does not (Linux 6.18) when the entry is the
    // name the kernel already holds: the file keeps its size and pages, and this test keeps it
    // that way. (Through another name of the same sample inode the pages are dropped; see
    // src/fuse/mod.rs.)
    let dir = fixtures().join("mds/basic");
    let exp = Expected::load(&dir);
    let biggest = exp
        .index
        .shards()
        .iter()
        .map(|s| s.raw.bytes)
        .max()
        .unwrap();
    // One shard of cache and no memory tier: once another shard is read, nothing in the
    // daemon knows the first one's sizes without fetching it again.
    let m = Mount::new(
        dir.to_str().unwrap(),
        &["--cache-limit", &biggest.to_string(), "--memory-limit", "0"],
    );
    // Unshuffled, one rank: position 0 of epoch 0 is sample 0, in shard 0.
    let names = m.list("rank-0/epoch-0");
    let first = m.mnt.join("rank-0/epoch-0").join(&names[0]);
    let want = exp.files(0);
    let want = &want
        .iter()
        .find(|(n, _)| names[0].split_once('.').unwrap().1 == n)
        .unwrap()
        .1;
    assert_eq!(&std::fs::read(&first).unwrap(), want);
    // Read a sample of the last shard through samples/: shard 0 is evicted.
    let last = exp.index.num_samples() - 1;
    let samples = m.list("samples");
    let prefix = format!(
        "{last:0width$}.",
        width = samples[0].split('.').next().unwrap().len()
    );
    let other = samples.iter().find(|n| n.starts_with(&prefix)).unwrap();
    std::fs::read(m.mnt.join("samples").join(other)).unwrap();
    assert!(
        cached_files_named(&m.cache, "shard.00000.mds").is_empty(),
        "shard 0 should have been evicted"
    );
    let fetched = |m: &Mount| m.status()["cache"][0]["bytes_fetched"].as_u64().unwrap();
    let reads = |m: &Mount| {
        m.status()["readahead"]["ranks"][0]["requests"]
            .as_u64()
            .unwrap()
    };
    let (fetched_before, reads_before) = (fetched(&m), reads(&m));
    // A listing, then `stat` and a read of the file: its size and pages are still what the
    // kernel had. Neither the stat nor the read reaches the store (shard 0 is not fetched
    // again) or the daemon's read path.
    let listed = std::fs::read_dir(m.mnt.join("rank-0/epoch-0"))
        .unwrap()
        .count();
    assert_eq!(listed, names.len());
    assert_eq!(std::fs::metadata(&first).unwrap().len(), want.len() as u64);
    assert_eq!(
        fetched(&m),
        fetched_before,
        "stat after a listing fetched the shard again"
    );
    assert_eq!(&std::fs::read(&first).unwrap(), want);
    assert_eq!(
        reads(&m),
        reads_before,
        "the listing dropped the cached pages"
    );
    assert!(cached_files_named(&m.cache, "shard.00000.mds").is_empty());
}

#[test]
fn a_later_epoch_reads_every_sample_from_the_page_cache() {
    // One rank, shuffled, two epochs: each epoch holds every sample once, in another order.
    // A sample is one inode under every name, so once epoch 0 has been read (and the
    // dataset fits in the page cache) epoch 1 is served by the kernel: no read reaches the
    // daemon, and the bytes are still each sample's own.
    let dir = fixtures().join("mds/basic");
    let exp = Expected::load(&dir);
    let m = Mount::new(dir.to_str().unwrap(), &["--shuffle", "--epochs", "2"]);
    let mut want: Vec<Vec<u8>> = (0..exp.samples.len() as u64)
        .flat_map(|g| exp.files(g).into_iter().map(|(_, b)| b))
        .collect();
    want.sort();
    let read_epoch = |e: u64| {
        let folder = m.mnt.join(format!("rank-0/epoch-{e}"));
        let names = m.list(&format!("rank-0/epoch-{e}"));
        let mut got = Vec::new();
        let mut inodes = std::collections::BTreeSet::new();
        for n in &names {
            let p = folder.join(n);
            got.push(std::fs::read(&p).unwrap());
            inodes.insert(std::os::unix::fs::MetadataExt::ino(
                &std::fs::metadata(&p).unwrap(),
            ));
        }
        got.sort();
        (names, got, inodes)
    };
    let reads = |m: &Mount| m.status()["read_latency"]["count"].as_u64().unwrap();
    let (names0, got0, inodes0) = read_epoch(0);
    assert!(
        got0 == want,
        "epoch 0 bytes differ from the fixture's samples"
    );
    // The kernel may still be answering a readahead it issued during the last read.
    let mut after0 = reads(&m);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let now = reads(&m);
        if now == after0 {
            break;
        }
        after0 = now;
    }
    // Empty files need no read; the others at least one each, or were handed to the page
    // cache when another file of their sample was read, or when their shard landed.
    let status = m.status();
    let pushed0 = status["page_cache_pushes"]["files"].as_u64().unwrap()
        + status["landed_pushes"]["files"].as_u64().unwrap();
    assert!(
        after0 + pushed0 > names0.len() as u64 / 2,
        "{after0} reads and {pushed0} files handed over for {} files",
        names0.len()
    );
    let (_, got1, inodes1) = read_epoch(1);
    assert_ne!(names0.len(), 0);
    assert!(
        got1 == want,
        "epoch 1 bytes differ from the fixture's samples"
    );
    assert_eq!(inodes0, inodes1, "epoch 1 names other inodes than epoch 0");
    assert_eq!(
        inodes0.len(),
        names0.len(),
        "two names of one epoch share an inode"
    );
    let samples: std::collections::BTreeSet<u64> = m
        .list("samples")
        .iter()
        .map(|n| {
            std::os::unix::fs::MetadataExt::ino(
                &std::fs::metadata(m.mnt.join("samples").join(n)).unwrap(),
            )
        })
        .collect();
    assert_eq!(samples, inodes0, "samples/ names other inodes");
    // Without a shared page cache every file of epoch 1 would be read again (thousands of
    // reads). The kernel may still drop a few pages on its own: about 1 run in 10 sees 1-11
    // reads of ~4,000 files (the listing gave their exact, unchanged sizes; not explained).
    let again = reads(&m) - after0;
    assert!(
        again * 100 <= names0.len() as u64,
        "epoch 1 reached the daemon {again} times for {} files: the page cache was not shared",
        names0.len()
    );
}

#[test]
fn a_file_sized_from_a_damaged_ranged_read_is_never_read_cut_or_padded() {
    use shardfs_testkit::s3::{FakeS3, ServerFault};
    // Columns a (bytes), b (int), c (bytes), a and c of equal length: the byte a damaged
    // response flips (its middle) is the first byte of b, an int whose text then changes
    // length (5 -> 95): a wrong size that keeps the sample's structure.
    let mut writer = mds::Writer::new(mds::WriterConfig {
        columns: vec![
            ("a".into(), "bytes".parse().unwrap()),
            ("b".into(), "int".parse().unwrap()),
            ("c".into(), "bytes".parse().unwrap()),
        ],
        compression: None,
        hashes: vec![],
        size_limit: None,
    })
    .unwrap();
    for _ in 0..10 {
        writer
            .write(&[&[1u8; 40][..], &5i64.to_le_bytes(), &[2u8; 40][..]])
            .unwrap();
    }
    let ds = writer.finish().unwrap();
    assert_eq!(ds.files.len(), 1);
    let server = FakeS3::start();
    for f in &ds.files {
        server.put("bkt", &format!("ints/{}", f.basename), f.data.clone());
    }
    server.put("bkt", "ints/index.json", ds.index_json.clone());
    let env = fake_s3_env();
    let m = Mount::with_env("s3://bkt/ints", &["--endpoint-url", &server.endpoint], &env);
    let file = |s: u32| m.mnt.join(format!("samples/{s:08}.b.txt"));
    // The shard's header is read (and kept) for a first stat; then the sample's two ranged
    // reads (made at once and compared) are both damaged alike (one damaged read would be
    // outvoted by a third).
    let right = std::fs::metadata(file(0)).unwrap().len();
    server.inject(
        ServerFault::Corrupt,
        Some(&format!("ints/{}", ds.files[0].basename)),
        Some(2),
    );
    let given = std::fs::metadata(file(3)).unwrap().len();
    assert_eq!(given, right + 1, "the damaged ranged read sized the file");
    assert_eq!(m.status()["cache"][0]["shards_fetched"], 0);
    // Its first read finds the verified bytes shorter: that read fails (EIO) until the kernel
    // has forgotten the size (told from a thread of the daemon's own), then the file reads
    // whole and right. Never the short bytes padded to the wrong size. (The kernel retries a
    // failed read once at once: on a busy machine the retry may already see the new size.)
    let started = std::time::Instant::now();
    let bytes = loop {
        match std::fs::read(file(3)) {
            Ok(b) => break b,
            Err(e) if started.elapsed() < std::time::Duration::from_secs(10) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("still failing after 10 s: {e}"),
        }
    };
    assert_eq!(bytes, std::fs::read(file(0)).unwrap());
    assert_eq!(bytes.len() as u64, right);
    assert_eq!(std::fs::metadata(file(3)).unwrap().len(), right);
}
