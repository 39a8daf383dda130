//! `latency`: a lock-free histogram of durations, cheap enough for every FUSE read (one
//! relaxed atomic add per bucket, count and sum), read as a snapshot for `/metrics`.
//!
//! Buckets are fixed: 16 µs × 4^k up to ~268 s, so a read served from the page cache,
//! one served from the disk tier and one waiting for a shard download land in different
//! buckets. Imports nothing of ours: `cache` (fetches) and `vfs` (reads) record into it, and
//! the CLI's metrics endpoint reads it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds: 16 µs × 4^k.
const BOUNDS_US: [u64; 13] = [
    16,
    64,
    256,
    1_024,
    4_096,
    16_384,
    65_536,
    262_144,
    1_048_576,
    4_194_304,
    16_777_216,
    67_108_864,
    268_435_456,
];

/// Durations observed so far, by bucket.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Observations at or below each bound (not cumulative); the last slot is above all.
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

/// A consistent-enough copy of a histogram for export (serialized as `{"le_seconds", "counts",
/// "count", "sum_seconds"}` for status.json and the metrics endpoint).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(into = "LatencyJson", try_from = "LatencyJson")]
pub struct LatencySnapshot {
    /// (upper bound in seconds, observations in this bucket alone), the last bound infinite.
    pub buckets: Vec<(f64, u64)>,
    /// Number of observations.
    pub count: u64,
    /// Sum of the observations, in seconds.
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        let k = BOUNDS_US.partition_point(|&b| b < us);
        self.buckets[k].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos().min(u128::from(u64::MAX)) as u64, Relaxed);
    }

    /// The current counts.
    pub fn snapshot(&self) -> LatencySnapshot {
        let buckets = BOUNDS_US
            .iter()
            .map(|&b| b as f64 / 1e6)
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets.iter().map(|c| c.load(Relaxed)))
            .collect();
        LatencySnapshot {
            buckets,
            count: self.count.load(Relaxed),
            sum_seconds: self.sum_ns.load(Relaxed) as f64 / 1e9,
        }
    }
}

/// The JSON form of a [`LatencySnapshot`]: `{"le_seconds": [finite bounds], "counts": [per
/// bucket, one more than bounds], "count", "sum_seconds"}` (JSON has no infinity).
#[derive(serde::Serialize, serde::Deserialize)]
struct LatencyJson {
    le_seconds: Vec<f64>,
    counts: Vec<u64>,
    count: u64,
    sum_seconds: f64,
}

/// A snapshot's JSON form does not have one count more than bounds.
#[derive(Debug, thiserror::Error)]
#[error("a latency histogram needs one count more than bounds: {bounds} bounds, {counts} counts")]
pub struct LatencyShapeError {
    bounds: usize,
    counts: usize,
}

impl From<LatencySnapshot> for LatencyJson {
    fn from(s: LatencySnapshot) -> Self {
        LatencyJson {
            le_seconds: s
                .buckets
                .iter()
                .map(|b| b.0)
                .filter(|b| b.is_finite())
                .collect(),
            counts: s.buckets.iter().map(|b| b.1).collect(),
            count: s.count,
            sum_seconds: s.sum_seconds,
        }
    }
}

impl TryFrom<LatencyJson> for LatencySnapshot {
    type Error = LatencyShapeError;
    fn try_from(j: LatencyJson) -> Result<Self, Self::Error> {
        if j.counts.len() != j.le_seconds.len() + 1 {
            return Err(LatencyShapeError {
                bounds: j.le_seconds.len(),
                counts: j.counts.len(),
            });
        }
        let buckets = j
            .le_seconds
            .into_iter()
            .chain(std::iter::once(f64::INFINITY))
            .zip(j.counts)
            .collect();
        Ok(LatencySnapshot {
            buckets,
            count: j.count,
            sum_seconds: j.sum_seconds,
        })
    }
}

impl Default for LatencySnapshot {
    /// Every bucket empty.
    fn default() -> Self {
        LatencyHistogram::default().snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_land_in_their_power_of_two_bucket() {
        let h = LatencyHistogram::default();
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_micros(16));
        h.observe(Duration::from_micros(17));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(1000));
        let s = h.snapshot();
        assert_eq!(s.count, 5);
        assert_eq!(s.buckets[0], (16e-6, 2));
        assert_eq!(s.buckets[1], (64e-6, 1));
        assert_eq!(s.buckets[4], (4_096e-6, 1));
        assert_eq!(s.buckets.last().map(|b| b.1), Some(1));
        assert!(s.buckets.last().is_some_and(|b| b.0.is_infinite()));
        assert!(
            (s.sum_seconds - 1000.003043).abs() < 1e-6,
            "{}",
            s.sum_seconds
        );
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<LatencySnapshot>(&text).unwrap(), s);
        let lopsided = r#"{"le_seconds": [1.0], "counts": [1], "count": 1, "sum_seconds": 1.0}"#;
        assert!(serde_json::from_str::<LatencySnapshot>(lopsided).is_err());
    }
}
