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
use prometheus_client::metrics::MetricType;
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

/// One metric family with its samples, collected from the status before encoding.
enum Family {
    Counter(Vec<(Labels, f64)>),
    Gauge(Vec<(Labels, f64)>),
    Histogram(Vec<(Labels, LatencySnapshot)>),
}

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The metric families of one status snapshot: (name, help, samples), in a fixed order.
fn families(status: &MountStatus) -> Vec<(&'static str, &'static str, Family)> {
    let mut out = Vec::new();
    let streams = &status.cache;
    let stream_labels = |i: usize, s: &StreamCacheStatus| {
        label(&[("stream", &i.to_string()), ("source", &s.source)])
    };
    let per_stream = |field: fn(&CacheStats) -> u64| -> Vec<(Labels, f64)> {
        streams
            .iter()
            .enumerate()
            .map(|(i, s)| (stream_labels(i, s), field(&s.stats) as f64))
            .collect()
    };
    out.push(("shardfs_store_fetched_bytes", "Bytes downloaded from the object store (as stored: compressed shards compressed), ranged reads included.", Family::Counter(per_stream(|c| c.bytes_fetched))));
    out.push((
        "shardfs_store_shard_fetches",
        "Whole shards downloaded, verified and cached.",
        Family::Counter(per_stream(|c| c.shards_fetched)),
    ));
    out.push((
        "shardfs_store_repaired_downloads",
        "Downloads in parts that failed verification and were made whole by fetching only their parts again.",
        Family::Counter(per_stream(|c| c.repaired_downloads)),
    ));
    out.push((
        "shardfs_store_parts_refetched",
        "Parts fetched again to repair downloads that failed verification.",
        Family::Counter(per_stream(|c| c.parts_refetched)),
    ));
    out.push((
        "shardfs_store_ranged_fetches",
        "Ranged requests for headers or samples of shards not on disk (stat before read).",
        Family::Counter(per_stream(|c| c.ranged_fetches)),
    ));
    let tiered = |memory: fn(&CacheStats) -> u64, disk: fn(&CacheStats) -> u64| {
        let mut v = Vec::new();
        for (i, s) in streams.iter().enumerate() {
            for (tier, field) in [("memory", memory), ("disk", disk)] {
                let mut labels = stream_labels(i, s);
                labels.push(("tier".into(), tier.into()));
                v.push((labels, field(&s.stats) as f64));
            }
        }
        v
    };
    out.push(("shardfs_cache_hits", "Look-ups served by the memory tier (samples, headers) or finding the shard on the disk tier.", Family::Counter(tiered(|c| c.memory_hits, |c| c.disk_hits))));
    out.push((
        "shardfs_cache_misses",
        "Look-ups the memory tier could not serve, or that had to fetch (or wait for) the shard.",
        Family::Counter(tiered(|c| c.memory_misses, |c| c.disk_misses)),
    ));
    out.push((
        "shardfs_cache_evictions",
        "Shards evicted from the disk tier to stay within the cache limit.",
        Family::Counter(per_stream(|c| c.evictions)),
    ));
    out.push((
        "shardfs_cache_usage_bytes",
        "Bytes of shards on the disk tier now.",
        Family::Gauge(per_stream(|c| c.usage_bytes)),
    ));
    let limits = per_stream(|c| c.limit_bytes)
        .into_iter()
        .filter(|(_, v)| *v < u64::MAX as f64)
        .collect();
    out.push((
        "shardfs_cache_limit_bytes",
        "The disk tier's byte limit (absent when unlimited).",
        Family::Gauge(limits),
    ));
    out.push((
        "shardfs_cache_resident_shards",
        "Shards on the disk tier now.",
        Family::Gauge(per_stream(|c| c.resident_shards)),
    ));
    let backends = streams
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut labels = stream_labels(i, s);
            labels.push(("backend".into(), s.stats.io_backend.to_string()));
            (labels, 1.0)
        })
        .collect();
    out.push((
        "shardfs_cache_io_backend",
        "1, labelled with how the stream's cache reads and writes its files (io_backend in status.json: io_uring-direct, pread-direct, io_uring-inline, io_uring or pread).",
        Family::Gauge(backends),
    ));
    out.push((
        "shardfs_memory_tier_bytes",
        "Bytes the memory tier holds now.",
        Family::Gauge(per_stream(|c| c.memory_tier_bytes)),
    ));
    out.push((
        "shardfs_downloading_bytes",
        "Bytes of shards being downloaded, held in memory until they are on disk.",
        Family::Gauge(per_stream(|c| c.downloading_bytes)),
    ));
    out.push((
        "shardfs_idle_download_buffer_bytes",
        "Bytes of buffers of finished downloads kept for the next ones.",
        Family::Gauge(per_stream(|c| c.idle_download_buffer_bytes)),
    ));
    let fetch = streams
        .iter()
        .enumerate()
        .map(|(i, s)| (stream_labels(i, s), s.fetch_latency.clone()))
        .collect();
    out.push((
        "shardfs_fetch_duration_seconds",
        "Time to download and verify one whole shard.",
        Family::Histogram(fetch),
    ));
    out.push((
        "shardfs_read_duration_seconds",
        "Time to answer one read of a sample file, waits for its shard included.",
        Family::Histogram(vec![(Labels::new(), status.read_latency.clone())]),
    ));

    let ra = &status.readahead;
    let one = |v: f64| vec![(Labels::new(), v)];
    out.push((
        "shardfs_stalls",
        "Reads that had to wait for their shard to arrive.",
        Family::Counter(one(ra.stalls as f64)),
    ));
    out.push((
        "shardfs_stall_seconds",
        "Total time reads waited for their shards.",
        Family::Counter(one(ra.stall_seconds)),
    ));
    out.push((
        "shardfs_prefetches",
        "Shards fetched ahead of their readers by the readahead scheduler.",
        Family::Counter(one(ra.prefetches as f64)),
    ));
    out.push((
        "shardfs_prefetched_bytes_for_next_epoch",
        "Bytes of shards the readahead fetched for a rank's next epoch while it read the current one.",
        Family::Counter(one(ra.prefetched_bytes_for_next_epoch as f64)),
    ));
    out.push((
        "shardfs_samples_advised",
        "Samples of cached shards asked into the page cache ahead of their readers.",
        Family::Counter(one(ra.samples_advised as f64)),
    ));
    out.push((
        "shardfs_samples_read_ahead",
        "Samples of cached shards read into memory ahead of their readers (cache files read past the page cache).",
        Family::Counter(per_stream(|c| c.samples_read_ahead)),
    ));
    out.push((
        "shardfs_read_ahead_hits",
        "Sample reads answered by a sample read ahead.",
        Family::Counter(per_stream(|c| c.read_ahead_hits)),
    ));
    out.push((
        "shardfs_fetches_in_flight",
        "Readahead fetches running now.",
        Family::Gauge(one(ra.fetches_in_flight as f64)),
    ));
    out.push((
        "shardfs_fetches_pending",
        "Readahead fetches planned and waiting for a slot.",
        Family::Gauge(one(ra.fetches_pending as f64)),
    ));

    let per_rank = |field: fn(&RankStatus) -> Option<f64>| -> Vec<(Labels, f64)> {
        ra.ranks
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
            .collect()
    };
    out.push((
        "shardfs_rank_epoch",
        "The epoch each rank is reading.",
        Family::Gauge(per_rank(|r| Some(r.epoch as f64))),
    ));
    out.push((
        "shardfs_rank_position",
        "The furthest position each rank has read in its epoch (samples from the epoch's start).",
        Family::Gauge(per_rank(|r| r.cursor.map(|c| c as f64))),
    ));
    out.push((
        "shardfs_rank_lowest_unread_position",
        "The lowest position each rank's slowest worker has still to read (readahead keeps its shards).",
        Family::Gauge(per_rank(|r| r.lowest_unread.map(|c| c as f64))),
    ));
    out.push((
        "shardfs_rank_epoch_samples",
        "Samples in each rank's current epoch.",
        Family::Gauge(per_rank(|r| r.epoch_samples.map(|n| n as f64))),
    ));
    out.push((
        "shardfs_rank_samples_per_second",
        "Each rank's pace through its current epoch since the epoch's first read.",
        Family::Gauge(per_rank(|r| Some(r.samples_per_second))),
    ));
    out.push((
        "shardfs_rank_read_bytes",
        "Bytes of sample files delivered to each rank.",
        Family::Counter(per_rank(|r| Some(r.bytes_read as f64))),
    ));
    out.push((
        "shardfs_rank_reads",
        "Read requests of sample files from each rank.",
        Family::Counter(per_rank(|r| Some(r.requests as f64))),
    ));

    let sum =
        |field: fn(&CacheStats) -> u64| streams.iter().map(|s| field(&s.stats) as f64).sum::<f64>();
    let errors = vec![
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
            ra.prefetch_errors as f64,
        ),
    ];
    let answers = &status.errors.answers;
    out.push((
        "shardfs_error_answers",
        "Requests answered with an error because their shard was unavailable, by kind: reads of sample files (read) and look-ups of sizes not known yet (size); repeats included.",
        Family::Counter(vec![
            (label(&[("op", "read")]), answers.read as f64),
            (label(&[("op", "size")]), answers.size as f64),
        ]),
    ));
    out.push(("shardfs_errors", "Failures by kind: reads answered EIO (shard_unavailable), failed shard fills, downloads or cached files that failed verification, shards the cache disk could not take, failed prefetches.", Family::Counter(errors)));
    out.push((
        "shardfs_uptime_seconds",
        "Seconds since the mount started.",
        Family::Gauge(one(status.uptime_seconds)),
    ));
    let m = &status.memory;
    let memory: Vec<_> = [
        ("resident", m.rss_bytes),
        ("heap_in_use", m.heap_in_use_bytes),
        ("heap_mapped", m.heap_mapped_bytes),
        ("heap_free", m.heap_free_bytes),
        ("page_pool", Some(m.page_pool_mapped_bytes)),
        ("page_pool_free", Some(m.page_pool_free_bytes)),
    ]
    .into_iter()
    .filter_map(|(kind, n)| n.map(|n| (label(&[("kind", kind)]), n as f64)))
    .collect();
    out.push((
        "shardfs_process_memory_bytes",
        "The daemon's memory by kind: resident (RSS), heap_in_use, heap_mapped and heap_free (malloc's, glibc builds only), page_pool (buffers mapped apart from malloc) and page_pool_free (of those, kept free for reuse).",
        Family::Gauge(memory),
    ));
    out.push((
        "shardfs_process_threads",
        "Threads of the daemon.",
        Family::Gauge(m.threads.map(|t| one(t as f64)).unwrap_or_default()),
    ));
    out
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
        for (name, help, family) in families(&status) {
            let (kind, samples, histograms) = match family {
                Family::Counter(s) => (MetricType::Counter, s, Vec::new()),
                Family::Gauge(s) => (MetricType::Gauge, s, Vec::new()),
                Family::Histogram(h) => (MetricType::Histogram, Vec::new(), h),
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
