//! `bench-s3-server`: an S3-compatible server for the benchmarks that serves a directory and
//! emulates a remote link, so shardfs and its peers can be compared on one machine.
//!
//! Built on the `s3s` crate (SigV4 is verified, one access key). The link knobs are the two
//! that matter for object-store traffic: first-byte latency added to every request
//! (`--latency-ms`, S3 is ~15–30 ms) and a per-connection bandwidth cap (`--bandwidth-mbps`,
//! megabits per second per TCP connection each way, as a single S3 connection tops out far
//! below the NIC). Clients may write too (PutObject, multipart uploads, DeleteObject(s)):
//! objects written become files under DIR, and uploads pay the same latency and cap as
//! downloads. `GET /__bench/stats` (unsigned, undelayed) returns the request and byte counters.
//!
//! Prints `listening on http://127.0.0.1:PORT` on stdout once it accepts connections.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;

// The server itself lives in the dev-only test kit, shared with the tests (which run it in
// process with objects in memory, fault rules and per-key counts).
use shardfs_testkit::s3::bucket::{self, Buckets};
use shardfs_testkit::s3::faults;
use shardfs_testkit::s3::serve::Link;
use shardfs_testkit::s3::stats::Stats;

/// Serve DIR (each subfolder a bucket) over S3 with an emulated remote link.
#[derive(Debug, Parser)]
struct Args {
    /// Folder whose subfolders are the buckets.
    dir: PathBuf,
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Delay before each request is answered (first-byte latency), in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    latency_ms: f64,
    /// Cap per TCP connection and direction in megabits per second (0 = none).
    #[arg(long, default_value_t = 0.0)]
    bandwidth_mbps: f64,
    /// Access key clients sign with.
    #[arg(long, default_value = "bench")]
    access_key: String,
    /// Secret key clients sign with.
    #[arg(long, default_value = "benchsecret")]
    secret_key: String,
    /// Log every request (method, path, Range header, status, time) to stderr.
    #[arg(long)]
    log_requests: bool,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// ETags sent: opaque (cheap, not an MD5), md5 (single-part S3 upload), multipart
    /// (`aws s3 cp`: 8 MiB parts). md5 and multipart read every object once at start.
    #[arg(long, value_enum, default_value_t = bucket::EtagMode::Opaque)]
    etags: bucket::EtagMode,
    /// The full-object checksum every object keeps: crc64nvme (what S3 computes for every
    /// upload without a checksum of its own since December 2024; answered to a HEAD with
    /// checksum mode; each object read once at start) or none (an ETag-only store).
    #[arg(long, value_enum, default_value_t = Checksums::Crc64nvme)]
    checksums: Checksums,
    /// Share of GETs hit by a fault (0 = none; see `--faults`).
    #[arg(long, default_value_t = 0.0)]
    fault_rate: f64,
    /// Faults to inject: any of 503,reset,truncate,corrupt,stall (default: all).
    #[arg(long, default_value = "")]
    faults: String,
    /// How long a `stall` fault delays the answer, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    stall_ms: u64,
    /// Seed of the fault choices (a run with the same seed injects the same sequence).
    #[arg(long, default_value_t = 1)]
    fault_seed: u64,
}

/// `--checksums`: what the store keeps of each object besides its ETag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Checksums {
    /// A full-object CRC64NVME, as S3.
    Crc64nvme,
    /// Nothing: the ETag is the only check.
    None,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> Result<()> {
    let stats = Arc::new(Stats::default());
    let kinds = faults::parse_kinds(&args.faults).map_err(anyhow::Error::msg)?;
    let faults = Arc::new(faults::Faults::new(
        args.fault_rate,
        kinds,
        Duration::from_millis(args.stall_ms),
        args.fault_seed,
    ));
    let store = Arc::new(
        Buckets::open(
            &args.dir,
            stats,
            args.etags,
            faults,
            args.checksums == Checksums::Crc64nvme,
        )
        .with_context(|| format!("cannot index {}", args.dir.display()))?,
    );
    for (b, n, bytes) in store.summary() {
        eprintln!("bucket {b}: {n} objects, {bytes} bytes");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    eprintln!(
        "latency {} ms per request, bandwidth cap {} Mbit/s per connection",
        args.latency_ms, args.bandwidth_mbps
    );
    let link = Link {
        latency: Duration::from_secs_f64(args.latency_ms.max(0.0) / 1000.0),
        bytes_per_sec: (args.bandwidth_mbps > 0.0).then(|| args.bandwidth_mbps * 1e6 / 8.0),
        log_requests: args.log_requests,
    };
    shardfs_testkit::s3::serve::serve(listener, store, &args.access_key, &args.secret_key, link)
        .await;
    Ok(())
}
