//! `--metrics-addr`: a real mount's Prometheus endpoint, scraped before and after reads.

use std::io::{Read, Write};
use std::net::TcpStream;

use super::Mount;
use crate::common::fixtures;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// GET `path`; (status line, body).
fn get(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of the sample line that starts with `series` (name and labels).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn metrics_endpoint_counts_what_reads_do() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let dataset = fixtures().join("mds/basic");
    let m = Mount::new(
        dataset.to_str().unwrap(),
        &[
            "--shuffle",
            "--metrics-addr",
            &addr,
            "--cache-limit",
            "200MB",
        ],
    );
    let (status, before) = get(port, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(before.ends_with("# EOF\n"), "{before}");
    assert_eq!(value(&before, "shardfs_rank_reads_total{rank=\"0\"}"), 0.0);
    assert_eq!(value(&before, "shardfs_read_duration_seconds_count"), 0.0);

    let dir = m.mnt.join("rank-0/epoch-0");
    let mut files = 0u64;
    let mut bytes = 0u64;
    for e in std::fs::read_dir(&dir).unwrap() {
        let n = std::fs::read(e.unwrap().path()).unwrap().len() as u64;
        bytes += n;
        // An empty file is answered from its size alone: no read reaches the daemon.
        files += u64::from(n > 0);
    }
    let (_, after) = get(port, "/metrics");
    let reads = value(&after, "shardfs_rank_reads_total{rank=\"0\"}");
    // A file handed to the page cache when another file of its sample was read, or when its
    // shard landed, is read from there, unless its read came first.
    let pushed = value(&after, "shardfs_page_cache_pushed_files_total")
        + value(&after, "shardfs_landed_pushed_files_total");
    let pushed_bytes = value(&after, "shardfs_page_cache_pushed_bytes_total")
        + value(&after, "shardfs_landed_pushed_bytes_total");
    assert!(
        reads + pushed >= files as f64,
        "{reads} reads and {pushed} files handed over for {files} files"
    );
    let read_bytes = value(&after, "shardfs_rank_read_bytes_total{rank=\"0\"}");
    assert!(
        read_bytes <= bytes as f64 && read_bytes + pushed_bytes >= bytes as f64,
        "{read_bytes} bytes read and {pushed_bytes} handed over for {bytes}"
    );
    assert_eq!(value(&after, "shardfs_read_duration_seconds_count"), reads);
    let source = format!("file://{}", dataset.to_str().unwrap());
    let stream = format!("{{stream=\"0\",source=\"{source}\"}}");
    assert!(
        value(
            &after,
            &format!("shardfs_store_fetched_bytes_total{stream}")
        ) > 0.0
    );
    assert!(
        value(
            &after,
            &format!("shardfs_store_shard_fetches_total{stream}")
        ) >= 1.0
    );
    assert!(value(&after, &format!("shardfs_cache_usage_bytes{stream}")) > 0.0);
    assert_eq!(
        value(&after, &format!("shardfs_cache_limit_bytes{stream}")),
        200e6
    );
    assert!(
        value(
            &after,
            &format!("shardfs_fetch_duration_seconds_count{stream}")
        ) >= 1.0
    );
    let hits =
        format!("shardfs_cache_hits_total{{stream=\"0\",source=\"{source}\",tier=\"disk\"}}");
    assert!(value(&after, &hits) > 0.0);
    let samples = value(&after, "shardfs_rank_epoch_samples{rank=\"0\"}");
    assert!(samples > 0.0);
    assert_eq!(
        value(&after, "shardfs_rank_position{rank=\"0\"}"),
        samples - 1.0
    );
    assert_eq!(
        value(&after, "shardfs_errors_total{kind=\"shard_unavailable\"}"),
        0.0
    );

    let (status, _) = get(port, "/nothing");
    assert!(status.contains("404"), "{status}");
}

#[test]
fn a_busy_metrics_address_fails_the_mount_clearly() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = std::process::Command::new(super::bin())
        .args(["mount", fixtures().join("mds/basic").to_str().unwrap()])
        .arg(&mnt)
        .args(["--cache-dir", dir.path().join("c").to_str().unwrap()])
        .args(["--metrics-addr", &addr])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--metrics-addr") && err.contains(&addr),
        "{err}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(mnt.to_str().unwrap()), "left mounted");
}
