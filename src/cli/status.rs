//! `shardfs status MOUNTPOINT [--once|--json]`: a live view of a running mount, read from
//! its `.shardfs/status.json` — one progress bar per rank through its current epoch with
//! samples/s, then the cache against its limit, fetch throughput, stalls and the last errors.
//! `--once` prints the same view as text one time; `--json` prints the status as JSON.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cache::CacheStats;
use crate::status::MountStatus;

/// Arguments of `shardfs status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The shardfs mountpoint.
    pub mountpoint: PathBuf,
    /// Print the view once (as text) and exit.
    #[arg(long, conflicts_with = "json")]
    pub once: bool,
    /// Print the mount's status as JSON and exit.
    #[arg(long)]
    pub json: bool,
    /// Seconds between refreshes of the live view.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub interval: f64,
}

fn read_status(mountpoint: &Path) -> Result<MountStatus> {
    let path = mountpoint.join(".shardfs/status.json");
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {} (is {} a shardfs mount?)",
            path.display(),
            mountpoint.display()
        )
    })?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a shardfs status file", path.display()))
}

/// `1.5 MiB`-style sizes, in the binary units that size options take (`--cache-limit 200GiB`
/// shows as `200 GiB`); one decimal where the size is not a whole number of its unit.
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n.max(0.0);
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    let text = format!("{v:.1}");
    let text = text.strip_suffix(".0").unwrap_or(&text);
    format!("{text} {}", UNITS[u])
}

/// One rank's line: (label, position+1, epoch length, samples/s).
fn ranks(status: &MountStatus) -> Vec<(String, u64, u64, f64)> {
    status
        .readahead
        .ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let rank = status.ranks.get(i).copied().unwrap_or(i as u64);
            let done = r.cursor.map(|c| c + 1).unwrap_or(0);
            let len = r.epoch_samples.unwrap_or(0).max(done);
            let label = format!("rank {rank} epoch {}", r.epoch);
            (label, done, len, r.samples_per_second)
        })
        .collect()
}

/// A cache counter summed over the streams.
fn sum(status: &MountStatus, field: fn(&CacheStats) -> u64) -> f64 {
    status.cache.iter().map(|s| field(&s.stats) as f64).sum()
}

/// How the streams' caches read their files (`io_backend`), each name once.
fn io_backends(status: &MountStatus) -> String {
    let mut names: Vec<&str> = Vec::new();
    for s in &status.cache {
        let name = &*s.stats.io_backend;
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return "-".into();
    }
    names.join(", ")
}

/// The lines under the bars: cache, fetches, stalls, errors. `fetch_rate` is bytes/s.
fn summary(status: &MountStatus, fetch_rate: f64) -> Vec<String> {
    let limit = sum(status, |c| c.limit_bytes);
    let usage = sum(status, |c| c.usage_bytes);
    let limit_text = if status.cache.iter().any(|s| s.stats.limit_bytes == u64::MAX) {
        "no limit".to_string()
    } else {
        format!(
            "{} ({:.0} %)",
            human_bytes(limit),
            if limit > 0.0 {
                usage / limit * 100.0
            } else {
                0.0
            }
        )
    };
    let ra = &status.readahead;
    let mut lines = vec![
        format!(
            "cache   {} of {}, {} shards on disk, {} evicted, io {}",
            human_bytes(usage),
            limit_text,
            sum(status, |c| c.resident_shards),
            sum(status, |c| c.evictions),
            io_backends(status)
        ),
        format!(
            "fetch   {}/s, {} in all ({} shards), {} in flight, {} queued",
            human_bytes(fetch_rate),
            human_bytes(fetched_bytes(status)),
            sum(status, |c| c.shards_fetched),
            ra.fetches_in_flight,
            ra.fetches_pending
        ),
        format!(
            "stalls  {} reads waited {:.1} s for their shard",
            ra.stalls, ra.stall_seconds
        ),
    ];
    let errors = &status.errors;
    lines.push(format!("errors  {}", errors.count));
    for e in errors.recent.iter().take(3) {
        match e.errno.as_str() {
            "" => lines.push(format!("        {}: {}", e.shard, e.why)),
            errno => lines.push(format!("        {} ({errno}): {}", e.shard, e.why)),
        }
    }
    lines
}

/// The whole view as plain text (`--once`).
pub fn render_text(mountpoint: &Path, status: &MountStatus) -> String {
    let mut out = format!(
        "{}  pid {}, up {:.0} s, {} samples\n",
        mountpoint.display(),
        status.pid,
        status.uptime_seconds,
        status.samples
    );
    for (label, done, len, rate) in ranks(status) {
        let pct = if len > 0 {
            done as f64 / len as f64 * 100.0
        } else {
            0.0
        };
        let width = 30usize;
        let filled = ((pct / 100.0) * width as f64).round() as usize;
        out.push_str(&format!(
            "{label:<18} [{}{}] {done}/{len} ({pct:.1} %)  {rate:.0} samples/s\n",
            "#".repeat(filled.min(width)),
            "-".repeat(width - filled.min(width)),
        ));
    }
    // Without two snapshots, the fetch rate is the average since the mount started.
    let uptime = status.uptime_seconds;
    let rate = if uptime > 0.0 {
        fetched_bytes(status) / uptime
    } else {
        0.0
    };
    for l in summary(status, rate) {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// Runs `shardfs status`.
pub fn run(args: StatusArgs) -> Result<()> {
    let status = read_status(&args.mountpoint)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    if args.once || !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        print!("{}", render_text(&args.mountpoint, &status));
        return Ok(());
    }
    if !(args.interval > 0.0 && args.interval.is_finite()) {
        bail!("--interval must be a positive number of seconds");
    }
    live(&args, status)
}

/// The refreshing view: indicatif bars per rank plus summary lines, until the mount goes away
/// or Ctrl-C.
fn live(args: &StatusArgs, mut status: MountStatus) -> Result<()> {
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
    let header = multi.add(ProgressBar::new_spinner());
    header.set_style(ProgressStyle::with_template("{msg}")?);
    let bar_style = ProgressStyle::with_template(
        "{prefix:<18} [{bar:30.cyan/blue}] {pos}/{len} ({percent} %)  {msg}",
    )?
    .progress_chars("#>-");
    let mut bars: Vec<ProgressBar> = Vec::new();
    let mut lines: Vec<ProgressBar> = Vec::new();
    let mut last = (Instant::now(), fetched_bytes(&status));
    let mut rate = 0.0;
    loop {
        header.set_message(format!(
            "{}  pid {}, up {:.0} s, {} samples",
            args.mountpoint.display(),
            status.pid,
            status.uptime_seconds,
            status.samples
        ));
        let r = ranks(&status);
        while bars.len() < r.len() {
            let b = multi.add(ProgressBar::new(0));
            b.set_style(bar_style.clone());
            bars.push(b);
        }
        for (b, (label, done, len, sps)) in bars.iter().zip(r) {
            b.set_prefix(label);
            b.set_length(len);
            b.set_position(done);
            b.set_message(format!("{sps:.0} samples/s"));
        }
        let text = summary(&status, rate);
        while lines.len() < text.len() {
            let l = multi.add(ProgressBar::new_spinner());
            l.set_style(ProgressStyle::with_template("{msg}")?);
            lines.push(l);
        }
        for (i, l) in lines.iter().enumerate() {
            l.set_message(text.get(i).cloned().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_secs_f64(args.interval));
        status = match read_status(&args.mountpoint) {
            Ok(s) => s,
            Err(e) => {
                header.finish_with_message(format!("{e:#}"));
                return Ok(());
            }
        };
        let now = (Instant::now(), fetched_bytes(&status));
        let secs = now.0.duration_since(last.0).as_secs_f64();
        rate = if secs > 0.0 {
            (now.1 - last.1).max(0.0) / secs
        } else {
            0.0
        };
        last = now;
    }
}

/// Bytes fetched from the store so far, all streams.
fn fetched_bytes(status: &MountStatus) -> f64 {
    sum(status, |c| c.bytes_fetched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_view_shows_progress_cache_and_errors() {
        use crate::status::{ErrorsStatus, RankStatus, ReadaheadStatus, ShardFailure};
        let failure = ShardFailure {
            shard: "shard.00001.mds".into(),
            why: "hash mismatch".into(),
            ..ShardFailure::default()
        };
        let rank = RankStatus {
            epoch: 1,
            cursor: Some(49),
            epoch_samples: Some(100),
            samples_per_second: 12.0,
            ..RankStatus::default()
        };
        let stats = CacheStats {
            usage_bytes: 512 << 20,
            limit_bytes: 1 << 30,
            resident_shards: 8,
            bytes_fetched: 2 << 30,
            shards_fetched: 30,
            io_backend: "io_uring-direct".into(),
            ..CacheStats::default()
        };
        let status = MountStatus {
            pid: 7,
            uptime_seconds: 10.0,
            samples: 100,
            ranks: vec![5],
            errors: ErrorsStatus {
                count: 1,
                recent: vec![failure],
                ..ErrorsStatus::default()
            },
            readahead: ReadaheadStatus {
                stalls: 2,
                stall_seconds: 0.5,
                fetches_in_flight: 1,
                fetches_pending: 3,
                ranks: vec![rank],
                ..ReadaheadStatus::default()
            },
            cache: vec![crate::status::StreamCacheStatus {
                stats,
                ..Default::default()
            }],
            ..MountStatus::default()
        };
        let text = render_text(Path::new("/mnt/ds"), &status);
        for want in [
            "/mnt/ds  pid 7",
            "rank 5 epoch 1",
            "50/100 (50.0 %)  12 samples/s",
            "cache   512 MiB of 1 GiB (50 %), 8 shards on disk, 0 evicted, io io_uring-direct",
            "fetch   204.8 MiB/s, 2 GiB in all (30 shards), 1 in flight, 3 queued",
            "stalls  2 reads waited 0.5 s",
            "errors  1",
            "shard.00001.mds: hash mismatch",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert_eq!(human_bytes(999.0), "999 B");
        assert_eq!(human_bytes(1.5 * 1024.0 * 1024.0), "1.5 MiB");
        // What was typed comes back: 200GiB is not shown as 214.7 GB.
        assert_eq!(human_bytes(200.0 * 1024f64.powi(3)), "200 GiB");
        assert_eq!(human_bytes(1023.0), "1023 B");
    }
}
