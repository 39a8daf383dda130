//! `shardfs status`: the text, JSON and live views of a real mount.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{bin, succeeded, Mount};
use crate::common::fixtures;

#[test]
fn status_once_and_json_describe_a_mount_being_read() {
    let m = Mount::new(
        fixtures().join("mds/basic").to_str().unwrap(),
        &["--shuffle", "--cache-limit", "50MB"],
    );
    let names = m.list("rank-0/epoch-0");
    let positions: std::collections::BTreeSet<&str> =
        names.iter().map(|n| n.split('.').next().unwrap()).collect();
    let half: Vec<&&str> = positions.iter().take(positions.len() / 2).collect();
    for n in &names {
        if half.iter().any(|p| n.starts_with(**p)) {
            std::fs::read(m.mnt.join("rank-0/epoch-0").join(n)).unwrap();
        }
    }
    let out = succeeded(Command::new(bin()).args(["status", "--once"]).arg(&m.mnt));
    let text = String::from_utf8_lossy(&out.stdout);
    let epoch_len = positions.len();
    assert!(text.contains("rank 0 epoch 0"), "{text}");
    // Progress is the highest position read through the daemon: files of shards that landed
    // are handed to the page cache, except one sample in every 16 (`MARK_EVERY`), whose
    // reads still come through.
    let shown: usize = text
        .split_once(&format!("/{epoch_len} ("))
        .and_then(|(before, _)| before.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no progress of {epoch_len} samples in {text}"));
    assert!(
        shown <= half.len() && shown + 16 > half.len(),
        "{shown} shown, {} read, in {text}",
        half.len()
    );
    // 50,000,000 bytes, shown in the binary units size options take.
    assert!(text.contains("of 47.7 MiB ("), "{text}");
    assert!(text.contains("errors  0"), "{text}");

    let out = Command::new(bin())
        .args(["status", "--json"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cursor = v["readahead"]["ranks"][0]["cursor"].as_u64().unwrap();
    assert_eq!(cursor + 1, shown as u64, "the cursor is the progress shown");
    assert_eq!(
        v["readahead"]["ranks"][0]["epoch_samples"],
        epoch_len as u64
    );

    // Not a mount: a clear error.
    let out = Command::new(bin())
        .args(["status", "--once", "/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is / a shardfs mount?"));
}

#[test]
fn live_status_refreshes_on_a_terminal_and_ends_with_the_mount() {
    let m = Mount::new(
        fixtures().join("mds/basic").to_str().unwrap(),
        &["--shuffle"],
    );
    let out_dir = tempfile::tempdir().unwrap();
    let log = out_dir.path().join("screen.txt");
    // `script` gives the view a terminal, as a person running it would.
    let cmd = format!(
        "{} status --interval 0.1 {}",
        bin().display(),
        m.mnt.display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &cmd])
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("the `script` command (bsdutils) runs the live view on a terminal");
    std::thread::sleep(Duration::from_millis(600));
    for n in m.list("rank-0/epoch-0").iter().take(30) {
        std::fs::read(m.mnt.join("rank-0/epoch-0").join(n)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the live view exited early"
    );
    drop(m);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the live view outlived its mount"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    let screen = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).to_string();
    assert!(screen.contains("rank 0 epoch 0"), "{screen}");
    assert!(screen.contains("samples/s"), "{screen}");
    assert!(screen.contains("cache "), "{screen}");
}

#[test]
fn samples_of_cached_shards_are_advised_ahead_of_their_reader() {
    // Epoch 0 fills the cache; reading epoch 1 in order then makes the readahead ask the
    // kernel for the next samples' bytes of the shards on disk (status shows the count).
    // Advice is for cached files read through the page cache.
    let m = Mount::with_env(
        fixtures().join("mds/basic").to_str().unwrap(),
        &["--shuffle", "--epochs", "2"],
        &[("SHARDFS_DIRECT_IO", "off")],
    );
    for epoch in ["rank-0/epoch-0", "rank-0/epoch-1"] {
        for n in m.list(epoch) {
            std::fs::read(m.mnt.join(epoch).join(n)).unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let (planned, cached) = loop {
        let v = m.status();
        let planned = v["readahead"]["samples_advised"].as_u64().unwrap();
        let cached = v["cache"][0]["samples_advised"].as_u64().unwrap();
        if (planned > 0 && cached > 0) || Instant::now() > deadline {
            break (planned, cached);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(planned > 0, "no sample advised: {}", m.status());
    // No --cache-limit: the limit is JSON null, not u64::MAX (issue 38).
    assert_eq!(
        m.status()["cache"][0]["limit_bytes"],
        serde_json::Value::Null
    );
    assert_eq!(
        planned, cached,
        "every advice the planner counts reached the cache"
    );
}
