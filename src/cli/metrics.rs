//! `--metrics-addr HOST:PORT`: the mount's live counters as a Prometheus `/metrics` endpoint.
//!
//! Every scrape reads the same snapshot `.shardfs/status.json` shows ([`Vfs::status`], one typed [`MountStatus`])
//! and encodes it with the `prometheus-client` crate (OpenMetrics text, which Prometheus
//! scrapes natively), so the endpoint and the status file can never disagree. The server is
//! one thread with a blocking accept loop: scrapes come every few seconds, not thousands per
//! second. docs/METRICS.md lists every metric.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::cache::CacheStats;
use crate::latency::LatencySnapshot;
use crate::status::{MountStatus, RankStatus, StreamCacheStatus};
use crate::vfs::Vfs;
use anyhow::{Context, Result};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{self, Counter, Gauge, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Where the numbers of one scrape come from.
type StatusFn = Arc<dyn Fn() -> MountStatus + Send + Sync>;

#[derive(Clone)]
struct StatusCollector(StatusFn);

impl std::fmt::Debug for StatusCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusCollector")
    }
}

/// The samples of one metric family, read from the status before encoding.
enum Samples {
    Values(Vec<(Labels, f64)>),
    Histograms(Vec<(Labels, LatencySnapshot)>),
}

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Where a family's samples come from in a status snapshot.
enum Of {
    /// One sample per stream, from its cache's counters.
    Stream(fn(&CacheStats) -> u64),
    /// Two samples per stream, labelled `tier="memory"` and `tier="disk"`.
    Tiers(fn(&CacheStats) -> u64, fn(&CacheStats) -> u64),
    /// One unlabelled sample.
    One(fn(&MountStatus) -> f64),
    /// One sample per local rank that has a value, labelled with its global rank.
    Rank(fn(&RankStatus) -> Option<f64>),
    /// Samples with labels of their own.
    Labelled(fn(&MountStatus) -> Vec<(Labels, f64)>),
    /// Latency histograms.
    Histograms(fn(&MountStatus) -> Vec<(Labels, LatencySnapshot)>),
}

/// Every metric family (type, name, samples, help), in the order the endpoint writes them
/// (docs/METRICS.md lists them).
const FAMILIES: &[(MetricType, &str, Of, &str)] = &[
    (Counter, "shardfs_store_fetched_bytes", Of::Stream(|c| c.bytes_fetched), "Bytes downloaded from the object store (as stored: compressed shards compressed), ranged reads included."),
    (Counter, "shardfs_store_shard_fetches", Of::Stream(|c| c.shards_fetched), "Whole shards downloaded, verified and cached."),
    (Counter, "shardfs_store_repaired_downloads", Of::Stream(|c| c.repaired_downloads), "Downloads in parts that failed verification and were made whole by fetching only their parts again."),
    (Counter, "shardfs_store_parts_refetched", Of::Stream(|c| c.parts_refetched), "Parts fetched again to repair downloads that failed verification."),
    (Counter, "shardfs_store_checksum_questions", Of::Stream(|c| c.store_checksum_questions), "Times the store was asked for its own checksum of a shard (S3 checksum mode)."),
    (Counter, "shardfs_store_checksum_answers", Of::Stream(|c| c.store_checksum_answers), "Checksum-mode questions answered with a checksum (the shard then checked without an MD5)."),
    (Counter, "shardfs_store_ranged_fetches", Of::Stream(|c| c.ranged_fetches), "Ranged requests for headers or samples of shards not on disk (stat before read)."),
    (Counter, "shardfs_cache_hits", Of::Tiers(|c| c.memory_hits, |c| c.disk_hits), "Look-ups served by the memory tier (samples, headers) or finding the shard on the disk tier."),
    (Counter, "shardfs_cache_misses", Of::Tiers(|c| c.memory_misses, |c| c.disk_misses), "Look-ups the memory tier could not serve, or that had to fetch (or wait for) the shard."),
    (Counter, "shardfs_cache_evictions", Of::Stream(|c| c.evictions), "Shards evicted from the disk tier to stay within the cache limit."),
    (Gauge, "shardfs_cache_usage_bytes", Of::Stream(|c| c.usage_bytes), "Bytes of shards on the disk tier now."),
    (Gauge, "shardfs_cache_limit_bytes", Of::Labelled(cache_limits), "The disk tier's byte limit (absent when unlimited)."),
    (Gauge, "shardfs_cache_resident_shards", Of::Stream(|c| c.resident_shards), "Shards on the disk tier now."),
    (Gauge, "shardfs_cache_io_backend", Of::Labelled(io_backends), "1, labelled with how the stream's cache reads and writes its files (io_backend in status.json: io_uring-direct, pread-direct, io_uring-inline, io_uring or pread)."),
    (Gauge, "shardfs_memory_tier_bytes", Of::Stream(|c| c.memory_tier_bytes), "Bytes the memory tier holds now."),
    (Gauge, "shardfs_downloading_bytes", Of::Stream(|c| c.downloading_bytes), "Bytes of shards being downloaded, held in memory until they are on disk."),
    (Gauge, "shardfs_idle_download_buffer_bytes", Of::Stream(|c| c.idle_download_buffer_bytes), "Bytes of buffers of finished downloads kept for the next ones."),
    (Counter, "shardfs_download_buffers_made", Of::Stream(|c| c.download_buffers_made), "Downloads in parts that got a buffer of fresh memory."),
    (Counter, "shardfs_download_buffers_reused", Of::Stream(|c| c.download_buffers_reused), "Downloads in parts that got a kept buffer: an earlier download's, or one made ready ahead."),
    (Counter, "shardfs_download_buffers_prepared", Of::Stream(|c| c.download_buffers_prepared), "Download buffers made ready ahead of a download, their pages mapped in (when a reader's folder is listed on a cold start)."),
    (Histogram, "shardfs_fetch_duration_seconds", Of::Histograms(fetch_latencies), "Time to download and verify one whole shard."),
    (Histogram, "shardfs_read_duration_seconds", Of::Histograms(|s| vec![(Labels::new(), s.read_latency.clone())]), "Time to answer one read of a sample file, waits for its shard included."),
    (Counter, "shardfs_stalls", Of::One(|s| s.readahead.stalls as f64), "Reads that had to wait for their shard to arrive."),
    (Counter, "shardfs_stall_seconds", Of::One(|s| s.readahead.stall_seconds), "Total time reads waited for their shards."),
    (Counter, "shardfs_prefetches", Of::One(|s| s.readahead.prefetches as f64), "Shards fetched ahead of their readers by the readahead scheduler."),
    (Counter, "shardfs_prefetched_bytes_for_next_epoch", Of::One(|s| s.readahead.prefetched_bytes_for_next_epoch as f64), "Bytes of shards the readahead fetched for a rank's next epoch while it read the current one."),
    (Counter, "shardfs_samples_advised", Of::One(|s| s.readahead.samples_advised as f64), "Samples of cached shards asked into the page cache ahead of their readers."),
    (Counter, "shardfs_samples_read_ahead", Of::Stream(|c| c.samples_read_ahead), "Samples of cached shards read into memory ahead of their readers (cache files read past the page cache)."),
    (Counter, "shardfs_read_ahead_hits", Of::Stream(|c| c.read_ahead_hits), "Sample reads answered by a sample read ahead."),
    (Counter, "shardfs_page_cache_pushed_files", Of::One(|s| s.page_cache_pushes.files as f64), "Files of a sample handed to the kernel's page cache when its first file was read (their reads never reach the daemon)."),
    (Counter, "shardfs_page_cache_pushed_bytes", Of::One(|s| s.page_cache_pushes.bytes as f64), "Bytes of the files handed to the kernel's page cache."),
    (Counter, "shardfs_page_cache_push_drops", Of::One(|s| s.page_cache_pushes.dropped as f64), "Files not handed to the page cache because the queue to the kernel was full (read through FUSE instead)."),
    (Counter, "shardfs_page_cache_push_refusals", Of::One(|s| s.page_cache_pushes.refused as f64), "Files the kernel did not take into its page cache (it no longer held the inode)."),
    (Counter, "shardfs_landed_pushed_files", Of::One(|s| s.landed_pushes.files as f64), "Files of shards that landed from the store handed to the kernel's page cache before their readers asked (their reads never reach the daemon)."),
    (Counter, "shardfs_landed_pushed_bytes", Of::One(|s| s.landed_pushes.bytes as f64), "Bytes of the files of landed shards handed to the kernel's page cache."),
    (Counter, "shardfs_landed_push_drops", Of::One(|s| s.landed_pushes.dropped as f64), "Files of landed shards not handed to the page cache because the queue to the kernel was full (read through FUSE instead)."),
    (Counter, "shardfs_landed_push_refusals", Of::One(|s| s.landed_pushes.refused as f64), "Files of landed shards the kernel did not take into its page cache (it no longer held the inode)."),
    (Counter, "shardfs_listed_files_with_size", Of::One(|s| s.listed_files.with_size as f64), "Sample files listings gave out with their size (opened without a request)."),
    (Counter, "shardfs_listed_files_without_size", Of::One(|s| s.listed_files.without_size as f64), "Sample files listings gave out without their size (looked up, one round trip, when opened)."),
    (Gauge, "shardfs_fetches_in_flight", Of::One(|s| s.readahead.fetches_in_flight as f64), "Readahead fetches running now."),
    (Gauge, "shardfs_fetches_pending", Of::One(|s| s.readahead.fetches_pending as f64), "Readahead fetches planned and waiting for a slot."),
    (Gauge, "shardfs_rank_epoch", Of::Rank(|r| Some(r.epoch as f64)), "The epoch each rank is reading."),
    (Gauge, "shardfs_rank_position", Of::Rank(|r| r.cursor.map(|c| c as f64)), "The furthest position each rank has read in its epoch (samples from the epoch's start)."),
    (Gauge, "shardfs_rank_lowest_unread_position", Of::Rank(|r| r.lowest_unread.map(|c| c as f64)), "The lowest position each rank's slowest worker has still to read (readahead keeps its shards)."),
    (Gauge, "shardfs_rank_epoch_samples", Of::Rank(|r| r.epoch_samples.map(|n| n as f64)), "Samples in each rank's current epoch."),
    (Gauge, "shardfs_rank_samples_per_second", Of::Rank(|r| Some(r.samples_per_second)), "Each rank's pace through its current epoch since the epoch's first read."),
    (Counter, "shardfs_rank_read_bytes", Of::Rank(|r| Some(r.bytes_read as f64)), "Bytes of sample files delivered to each rank."),
    (Counter, "shardfs_rank_reads", Of::Rank(|r| Some(r.requests as f64)), "Read requests of sample files from each rank."),
    (Counter, "shardfs_error_answers", Of::Labelled(error_answers), "Requests answered with an error because their shard was unavailable, by kind: reads of sample files (read) and look-ups of sizes not known yet (size); repeats included."),
    (Counter, "shardfs_errors", Of::Labelled(errors), "Failures by kind: reads answered EIO (shard_unavailable), failed shard fills, downloads or cached files that failed verification, shards the cache disk could not take, failed prefetches."),
    (Gauge, "shardfs_uptime_seconds", Of::One(|s| s.uptime_seconds), "Seconds since the mount started."),
    (Gauge, "shardfs_process_memory_bytes", Of::Labelled(process_memory), "The daemon's memory by kind: resident (RSS), heap_in_use, heap_mapped and heap_free (malloc's, glibc builds only), page_pool (buffers mapped apart from malloc) and page_pool_free (of those, kept free for reuse)."),
    (Gauge, "shardfs_process_threads", Of::Labelled(|s| Vec::from_iter(s.memory.threads.map(|t| (Labels::new(), t as f64)))), "Threads of the daemon."),
];

/// The labels of stream `i`'s samples.
fn stream_labels(i: usize, s: &StreamCacheStatus) -> Labels {
    label(&[("stream", &i.to_string()), ("source", &s.source)])
}

/// Each stream's disk-tier limit, where it has one.
fn cache_limits(status: &MountStatus) -> Vec<(Labels, f64)> {
    status
        .cache
        .iter()
        .enumerate()
        .filter(|(_, s)| s.stats.limit_bytes < u64::MAX)
        .map(|(i, s)| (stream_labels(i, s), s.stats.limit_bytes as f64))
        .collect()
}

/// A 1 per stream, labelled with its cache's I/O backend.
fn io_backends(status: &MountStatus) -> Vec<(Labels, f64)> {
    status
        .cache
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut labels = stream_labels(i, s);
            labels.push(("backend".into(), s.stats.io_backend.to_string()));
            (labels, 1.0)
        })
        .collect()
}

/// Each stream's shard download latencies.
fn fetch_latencies(status: &MountStatus) -> Vec<(Labels, LatencySnapshot)> {
    status
        .cache
        .iter()
        .enumerate()
        .map(|(i, s)| (stream_labels(i, s), s.fetch_latency.clone()))
        .collect()
}

/// Error answers by operation.
fn error_answers(status: &MountStatus) -> Vec<(Labels, f64)> {
    let answers = &status.errors.answers;
    vec![
        (label(&[("op", "read")]), answers.read as f64),
        (label(&[("op", "size")]), answers.size as f64),
    ]
}

/// Failures by kind, the caches' summed over the streams.
fn errors(status: &MountStatus) -> Vec<(Labels, f64)> {
    let sum = |field: fn(&CacheStats) -> u64| {
        status
            .cache
            .iter()
            .map(|s| field(&s.stats) as f64)
            .sum::<f64>()
    };
    vec![
        (
            label(&[("kind", "shard_unavailable")]),
            status.errors.count as f64,
        ),
        (label(&[("kind", "fill_failed")]), sum(|c| c.fill_failures)),
        (
            label(&[("kind", "verify_failed")]),
            sum(|c| c.verify_failures),
        ),
        (
            label(&[("kind", "disk_write_failed")]),
            sum(|c| c.disk_write_failures),
        ),
        (
            label(&[("kind", "prefetch_failed")]),
            status.readahead.prefetch_errors as f64,
        ),
    ]
}

/// The daemon's memory by kind (the kinds this build can measure).
fn process_memory(status: &MountStatus) -> Vec<(Labels, f64)> {
    let m = &status.memory;
    [
        ("resident", m.rss_bytes),
        ("heap_in_use", m.heap_in_use_bytes),
        ("heap_mapped", m.heap_mapped_bytes),
        ("heap_free", m.heap_free_bytes),
        ("page_pool", Some(m.page_pool_mapped_bytes)),
        ("page_pool_free", Some(m.page_pool_free_bytes)),
    ]
    .into_iter()
    .filter_map(|(kind, n)| n.map(|n| (label(&[("kind", kind)]), n as f64)))
    .collect()
}

impl Of {
    /// The family's samples in `status`.
    fn read(&self, status: &MountStatus) -> Samples {
        let streams = status.cache.iter().enumerate();
        match self {
            Of::Stream(field) => Samples::Values(
                streams
                    .map(|(i, s)| (stream_labels(i, s), field(&s.stats) as f64))
                    .collect(),
            ),
            Of::Tiers(memory, disk) => Samples::Values(
                streams
                    .flat_map(|(i, s)| {
                        [("memory", memory), ("disk", disk)].map(|(tier, field)| {
                            let mut labels = stream_labels(i, s);
                            labels.push(("tier".into(), tier.into()));
                            (labels, field(&s.stats) as f64)
                        })
                    })
                    .collect(),
            ),
            Of::One(value) => Samples::Values(vec![(Labels::new(), value(status))]),
            Of::Rank(field) => Samples::Values(
                status
                    .readahead
                    .ranks
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| {
                        let rank = status
                            .ranks
                            .get(i)
                            .map(|g| g.to_string())
                            .unwrap_or_else(|| i.to_string());
                        field(r).map(|v| (label(&[("rank", &rank)]), v))
                    })
                    .collect(),
            ),
            Of::Labelled(samples) => Samples::Values(samples(status)),
            Of::Histograms(histograms) => Samples::Histograms(histograms(status)),
        }
    }
}

/// Whole numbers are written as integers (`5000`, not `5000.0`).
fn whole(v: f64) -> Option<u64> {
    (v >= 0.0 && v.fract() == 0.0 && v < 9.0e15).then_some(v as u64)
}

fn encode_value(kind: MetricType, v: f64, m: MetricEncoder) -> Result<(), std::fmt::Error> {
    match (kind, whole(v)) {
        (MetricType::Counter, Some(n)) => ConstCounter::new(n).encode(m),
        (MetricType::Counter, None) => ConstCounter::new(v).encode(m),
        (_, Some(n)) => ConstGauge::new(n as i64).encode(m),
        (_, None) => ConstGauge::new(v).encode(m),
    }
}

impl prometheus_client::collector::Collector for StatusCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = (self.0)();
        for &(kind, name, ref of, help) in FAMILIES {
            let (samples, histograms) = match of.read(&status) {
                Samples::Values(s) => (s, Vec::new()),
                Samples::Histograms(h) => (Vec::new(), h),
            };
            let mut m = encoder.encode_descriptor(name, help, None, kind)?;
            // A lone unlabelled sample is written without `{}`.
            if let [(labels, v)] = &samples[..] {
                if labels.is_empty() {
                    encode_value(kind, *v, m)?;
                    continue;
                }
            }
            if let [(labels, h)] = &histograms[..] {
                if labels.is_empty() {
                    m.encode_histogram::<Labels>(h.sum_seconds, h.count, &h.buckets, None)?;
                    continue;
                }
            }
            for (labels, v) in samples {
                encode_value(kind, v, m.encode_family(&labels)?)?;
            }
            for (labels, h) in histograms {
                m.encode_family(&labels)?.encode_histogram::<Labels>(
                    h.sum_seconds,
                    h.count,
                    &h.buckets,
                    None,
                )?;
            }
        }
        Ok(())
    }
}

/// The OpenMetrics text of one status snapshot.
pub fn render(status: MountStatus) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StatusCollector(Arc::new(move || status.clone()))));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// Binds `addr` and serves `/metrics` for `vfs` on a background thread. Binding happens here,
/// so a bad or busy address fails the mount with a clear error.
pub fn serve(addr: &str, vfs: Arc<Vfs>) -> Result<SocketAddr> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("--metrics-addr {addr}: cannot listen"))?;
    let local = listener.local_addr().context("metrics listener address")?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StatusCollector(Arc::new(move || vfs.status()))));
    let registry = Arc::new(registry);
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => {
                        if let Err(e) = answer(stream, &registry) {
                            tracing::debug!(error = %e, "metrics request failed");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "metrics endpoint: accept failed"),
                }
            }
        })
        .context("cannot start the metrics thread")?;
    tracing::info!(addr = %local, "serving Prometheus metrics at /metrics");
    Ok(local)
}

/// Reads one HTTP request head and answers it (connection closed after each answer).
fn answer(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET", "/metrics") | ("HEAD", "/metrics") => {
            let mut body = String::new();
            let _ = prometheus_client::encoding::text::encode(&mut body, registry);
            (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body,
            )
        }
        ("GET", "/") | ("HEAD", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "shardfs: metrics at /metrics\n".to_string(),
        ),
        ("GET", _) | ("HEAD", _) => ("404 Not Found", "text/plain", "not found\n".into()),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        reply.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_becomes_openmetrics_text() {
        let h = crate::latency::LatencyHistogram::default();
        h.observe(Duration::from_millis(3));
        let ranks = vec![RankStatus {
            epoch: 1,
            cursor: Some(42),
            epoch_samples: Some(100),
            samples_per_second: 7.5,
            bytes_read: 1000,
            requests: 10,
            ..RankStatus::default()
        }];
        let stats = CacheStats {
            bytes_fetched: 5000,
            shards_fetched: 2,
            ranged_fetches: 1,
            memory_hits: 3,
            memory_misses: 4,
            disk_hits: 5,
            disk_misses: 6,
            usage_bytes: 4000,
            limit_bytes: u64::MAX,
            resident_shards: 2,
            fill_failures: 1,
            memory_tier_bytes: 700,
            downloading_bytes: 64,
            idle_download_buffer_bytes: 32,
            io_backend: "io_uring-direct".into(),
            ..CacheStats::default()
        };
        let status = MountStatus {
            uptime_seconds: 12.5,
            ranks: vec![3],
            errors: crate::status::ErrorsStatus {
                count: 2,
                ..Default::default()
            },
            readahead: crate::status::ReadaheadStatus {
                stalls: 4,
                stall_seconds: 1.5,
                prefetches: 9,
                fetches_in_flight: 1,
                ranks,
                ..Default::default()
            },
            cache: vec![StreamCacheStatus {
                stats,
                source: "s3://b/p".into(),
                dir: String::new(),
                fetch_latency: h.snapshot(),
            }],
            read_latency: h.snapshot(),
            memory: crate::cache::process_memory::ProcessMemory {
                rss_bytes: Some(40960000),
                threads: Some(65),
                page_pool_mapped_bytes: 4096,
                ..Default::default()
            },
            ..MountStatus::default()
        };
        let text = render(status);
        for want in [
            "# TYPE shardfs_store_fetched_bytes counter",
            "shardfs_store_fetched_bytes_total{stream=\"0\",source=\"s3://b/p\"} 5000",
            "shardfs_cache_hits_total{stream=\"0\",source=\"s3://b/p\",tier=\"disk\"} 5",
            "shardfs_rank_position{rank=\"3\"} 42",
            "shardfs_rank_samples_per_second{rank=\"3\"} 7.5",
            "shardfs_errors_total{kind=\"shard_unavailable\"} 2",
            "shardfs_errors_total{kind=\"fill_failed\"} 1",
            "shardfs_read_duration_seconds_bucket{le=\"0.004096\"} 1",
            "shardfs_read_duration_seconds_count 1",
            "shardfs_stall_seconds_total 1.5",
            "shardfs_memory_tier_bytes{stream=\"0\",source=\"s3://b/p\"} 700",
            "shardfs_downloading_bytes{stream=\"0\",source=\"s3://b/p\"} 64",
            "shardfs_idle_download_buffer_bytes{stream=\"0\",source=\"s3://b/p\"} 32",
            "shardfs_cache_io_backend{stream=\"0\",source=\"s3://b/p\",backend=\"io_uring-direct\"} 1",
            "shardfs_process_memory_bytes{kind=\"resident\"} 40960000",
            "shardfs_process_memory_bytes{kind=\"page_pool_free\"} 0",
            "shardfs_process_threads 65",
            "# EOF",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        // An unlimited cache has no limit sample; a C library without malloc statistics none
        // of the heap's.
        assert!(!text.contains("shardfs_cache_limit_bytes{"), "{text}");
        assert!(!text.contains("kind=\"heap_"), "{text}");
    }
}
