//! Issue 38, at the edges a new user or an operator meets first: `unmount` takes down only our
//! own mounts, which show as `fuse.shardfs` with their SOURCE; meaningless options are refused
//! in plain words; a resumed mount lists epochs from the resumed one; `mount` says in one line
//! what it mounted, and a clean session logs no warning.

use super::{bin, Mount};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/tiny")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// (type, source) of the top mount at `mnt`, from /proc/self/mountinfo.
fn mount_entry(mnt: &Path) -> Option<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let target = mnt.to_str().unwrap();
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(target))
        .map(|l| {
            let mut after = l.split(" - ").nth(1).unwrap_or("").split(' ');
            let t = after.next().unwrap_or("").to_string();
            (t, after.next().unwrap_or("").to_string())
        })
        .last()
}

/// Removes a tmpfs mounted by a test, even when the test fails.
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn unmount_refuses_other_filesystems_and_our_mounts_show_as_fuse_shardfs() {
    let source = tiny();
    let m = Mount::new(source.to_str().unwrap(), &[]);
    assert_eq!(
        mount_entry(&m.mnt),
        Some(("fuse.shardfs".into(), source.to_str().unwrap().into()))
    );
    // What operators look at says the same.
    let out = Command::new("findmnt")
        .args(["-n", "-o", "SOURCE,FSTYPE"])
        .arg(&m.mnt)
        .output()
        .expect("findmnt (util-linux) is needed");
    let found = text(&out.stdout);
    assert_eq!(
        found.split_whitespace().collect::<Vec<_>>(),
        [source.to_str().unwrap(), "fuse.shardfs"],
        "{found}"
    );
    let out = Command::new("df")
        .args(["--output=source,fstype"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains(&format!("{} fuse.shardfs", source.display())),
        "{}",
        text(&out.stdout)
    );

    // A tmpfs is not ours: refused in one line, and left mounted.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("tmpfs");
    std::fs::create_dir(&other).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(&other)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "mount -t tmpfs failed (the tests run as root)"
    );
    let _guard = Tmpfs(other.clone());
    let out = Command::new(bin())
        .arg("unmount")
        .arg(&other)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is not a shardfs mount"), "{err}");
    assert_eq!(mount_entry(&other).map(|e| e.0), Some("tmpfs".into()));

    // umount(8) works on ours as it does on any filesystem.
    let st = Command::new("umount").arg(&m.mnt).status().unwrap();
    assert!(st.success());
    assert_eq!(mount_entry(&m.mnt), None);
}

/// `shardfs mount ARGS` (background), its output.
fn mount(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("mount")
        .args(args)
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .unwrap()
}

#[test]
fn options_that_mean_nothing_are_refused_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let cache = dir.path().join("cache");
    let src = tiny();
    let base = [
        src.to_str().unwrap(),
        mnt.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    let cases: [(&[&str], &str); 5] = [
        (&["--epochs", "0"], "\"0\" is not a number of epochs"),
        (&["--epochs", "-1"], "\"-1\" is not a number of epochs"),
        (&["-o", "foo=bar"], "unknown mount option `foo`"),
        (
            &["-o", "ro,cache_limit=1GiB,foo"],
            "unknown mount option `foo`",
        ),
        (&["--fetch-part-size", "1"], "too small a part"),
    ];
    for (extra, want) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let out = mount(&args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{extra:?} was accepted");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!err.contains("similar") && !err.contains("-- -1"), "{err}");
        assert_eq!(mount_entry(&mnt), None, "{extra:?} mounted");
    }
    // The mountpoint forgotten: said so, not "no dataset".
    let out = mount(&[src.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("missing MOUNTPOINT"), "{err}");
    // A mountpoint with files in it is mounted over, with a warning.
    std::fs::write(mnt.join("hidden.txt"), b"x").unwrap();
    let out = mount(&base);
    let _m = Unmount(mnt.clone());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is not empty: its files are hidden"),
        "{}",
        text(&out.stderr)
    );
}

/// Unmounts on drop.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new(bin()).arg("unmount").arg(&self.0).status();
    }
}

#[test]
fn a_resumed_mount_lists_epochs_from_the_resumed_one() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    std::fs::write(
        &state,
        r#"{"epoch": 3, "sample_in_epoch": 8, "num_canonical_nodes": 1,
            "shuffle_seed": 9176, "initial_physical_nodes": 1}"#,
    )
    .unwrap();
    let m = Mount::new(
        tiny().to_str().unwrap(),
        &["--resume-state", state.to_str().unwrap(), "--epochs", "2"],
    );
    assert_eq!(m.list("rank-0"), ["epoch-3", "epoch-4"]);
    // The resumed epoch holds what is left of it; the next one is whole.
    assert_eq!(m.list("rank-0/epoch-3").len(), (48 - 8) * 6);
    assert_eq!(m.list("rank-0/epoch-4").len(), 48 * 6);
}

#[test]
fn mount_says_what_it_mounted_and_a_clean_session_logs_no_warning() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let cache = dir.path().join("cache");
    let src = tiny();
    let out = mount(&[
        src.to_str().unwrap(),
        mnt.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--epochs",
        "2",
    ]);
    let _m = Unmount(mnt.clone());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let log = cache.join("shardfs.log");
    assert_eq!(
        said.trim_end(),
        format!(
            "mounted {} at {}: 48 samples; rank-0 of 1 rank; epoch-0 to epoch-1 listed; log: {}",
            src.display(),
            mnt.display(),
            log.display()
        )
    );
    assert_eq!(text(&out.stderr), "");
    // Read every file (open, read, close), list, stat, then unmount.
    for e in std::fs::read_dir(mnt.join("rank-0/epoch-0")).unwrap() {
        let p = e.unwrap().path();
        assert!(!std::fs::read(&p).unwrap().is_empty() || p.to_str().unwrap().contains("text"));
    }
    let _ = std::fs::read(mnt.join(".shardfs/status.json")).unwrap();
    let out = Command::new(bin())
        .arg("unmount")
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !logged.contains("WARN") && !logged.contains("ERROR"),
        "a clean session logged:\n{logged}"
    );
}
