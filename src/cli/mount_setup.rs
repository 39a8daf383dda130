//! Resolving `shardfs mount` options into a running filesystem: checks that fail early with
//! one clear line (mountpoint, /dev/fuse, source), then store → index → plan → readahead →
//! vfs → FUSE session.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::mountinfo::is_mountpoint;
use super::ordering::{OrderingArgs, StreamArg};
use super::store_args::StoreArgs;
use crate::cache::{CacheOptions, Dataset, ShardCache};
use crate::fuse::{self, FuseOptions, Mounted};
use crate::mds;
use crate::order::{OrderError, Planner};
use crate::plan::{NextUse, OrderCache, OrderSource, MIN_KEEP_EPOCHS};
use crate::readahead::{CachedStreams, FurthestNextUse, Readahead, ReadaheadOptions};
use crate::size::parse_size;
use crate::store::StoreOptions;
use crate::vfs::{CachedShards, MdsDataset, Vfs, VfsConfig};

/// Every option of `shardfs mount` except `--foreground` and `-o`.
#[derive(Debug, clap::Args)]
pub struct MountConfig {
    /// SOURCE MOUNTPOINT, or only MOUNTPOINT when streams are given with --stream.
    #[arg(value_name = "SOURCE MOUNTPOINT", num_args = 1..=2, required = true)]
    positional: Vec<String>,
    /// Local cache folder (and the background log `shardfs.log`).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Most bytes of shards kept locally (suffixes KiB, MiB, GiB, TiB, and KB, MB, ...).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub cache_limit: Option<u64>,
    /// Most bytes of shards held in memory (default 256MiB, shared by all streams): shards
    /// being downloaded take at most half (their buffers are kept for the next downloads within
    /// that half, and freed after 30 s unused), the memory tier of headers and samples in front
    /// of the disk cache the rest (3/8 of it for samples read ahead of their readers when the
    /// cache files bypass the page cache). While the tier leaves its part unused (a cold start)
    /// downloads may borrow it, up to 4 x --fetch-concurrency x --fetch-part-size in all; the
    /// tier takes nothing new until it is given back (borrowed buffers are kept for the next
    /// downloads until the tier needs the room, which it takes back before it takes more).
    /// 0 turns the tier off (downloads then take 4 x --fetch-concurrency x --fetch-part-size).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
    /// How many epoch-E folders a listing of rank-R/ shows (at least 1), from epoch 0, or
    /// from the resumed epoch with --resume-state (any epoch can be opened by name); above 1,
    /// readahead also stops at the end of the last one.
    #[arg(long, default_value_t = 1, value_parser = parse_epochs, allow_negative_numbers = true)]
    pub epochs: u64,
    /// Let other users (and root) read the mount (needs user_allow_other in /etc/fuse.conf).
    #[arg(long)]
    pub allow_other: bool,
    /// Threads serving FUSE requests (default: one per CPU core, 2 to 16). Requests that wait
    /// for the store go to a pool of their own, so these threads only answer from memory or
    /// the cache disk; more threads than cores add wake-ups and scheduler switches between
    /// requests that each take microseconds.
    #[arg(long)]
    pub fuse_threads: Option<usize>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (off by default; docs/METRICS.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// Shard fetches in flight at once (each uses up to two connections' worth of parts; a read
    /// waiting for its shard may open half as many connections again when all are busy).
    #[arg(long, default_value_t = 8)]
    pub fetch_concurrency: usize,
    /// Shards larger than this are downloaded as parallel ranged GETs of this size (0: one
    /// GET per shard; else at least 64KiB). Used where the download can still be checked: a hash in index.json,
    /// or S3's ETag. Shards held in memory until they are checked and on disk are bounded to
    /// two parts per connection (4 x --fetch-concurrency x this: the downloads in flight, and
    /// as many shards again being checked and written) and to half of --memory-limit (more
    /// while the memory tier lends its unused part); a shard larger than that downloads alone.
    #[arg(long, value_name = "BYTES", value_parser = parse_part_size, default_value = "8MiB")]
    pub fetch_part_size: u64,
    /// How to reach the object store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Ordering and world options (the meaning of StreamingDataset's arguments).
    #[command(flatten)]
    pub ordering: OrderingArgs,
}

/// Most threads for FUSE requests that wait for a shard's download: one per reader waiting
/// for a different shard at a time is what keeps the other readers going, and a blocked thread
/// costs a few pages. Half the requests the kernel lets through at once (`max_background`).
const WAITING_THREADS: usize = 128;

/// One FUSE thread per CPU core this process may use, between 2 and 16. Against two per core
/// (the default until 2026-11-29) it cut the daemon's CPU per GB of a cold pass by ~12 % on
/// the bench's 2-core machine (median ratio of 10 alternating rounds; bench/RESULTS.md) and
/// moved neither pass's throughput.
pub fn default_fuse_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    cores.clamp(2, 16)
}

/// Smallest `--fetch-part-size` other than 0: below it a part's request costs more than its
/// bytes (a round trip each), and a shard of a few MiB would take thousands of them.
const MIN_FETCH_PART_SIZE: u64 = 64 << 10;

/// Parses `--fetch-part-size`: 0, or a size of at least [`MIN_FETCH_PART_SIZE`].
fn parse_part_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s).map_err(|e| e.to_string())?;
    if n != 0 && n < MIN_FETCH_PART_SIZE {
        return Err(format!(
            "{s:?} is too small a part: give 0 (one GET per shard) or at least 64KiB"
        ));
    }
    Ok(n)
}

/// Parses `--epochs`: a whole number of at least 1 (0 would list no epoch at all).
fn parse_epochs(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{s:?} is not a number of epochs: give a whole number, 1 or more"
        )),
    }
}

impl MountConfig {
    /// Checks what clap cannot: the positional arguments make sense together.
    pub fn check_arguments(&self) -> Result<()> {
        if self.positional.len() == 1 && self.ordering.streams.is_empty() {
            bail!(
                "missing MOUNTPOINT: `shardfs mount SOURCE MOUNTPOINT` (only MOUNTPOINT when the \
                 dataset is given with --stream)"
            );
        }
        Ok(())
    }

    /// The mountpoint (the last positional argument).
    pub fn mountpoint(&self) -> &Path {
        Path::new(self.positional.last().map(String::as_str).unwrap_or(""))
    }

    /// The source, when given positionally.
    pub fn source(&self) -> Option<&str> {
        (self.positional.len() == 2).then(|| self.positional[0].as_str())
    }

    /// The cache folder: `--cache-dir`, else the cache module's default
    /// (`$XDG_CACHE_HOME/shardfs`, `~/.cache/shardfs`, `/var/cache/shardfs` for root).
    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(crate::cache::default_cache_dir)
    }
}

/// Checks the mountpoint and /dev/fuse, opens the dataset and mounts it; also gives the
/// one-line summary `shardfs mount` prints.
pub fn check_and_mount(config: &MountConfig) -> Result<(Mounted, String)> {
    let mnt = config.mountpoint();
    check_mountpoint(mnt)?;
    check_dev_fuse()?;
    let (vfs, world_ranks) = open_vfs(config)?;
    let summary = summary(config, &vfs, world_ranks);
    if let Some(addr) = &config.metrics_addr {
        super::metrics::serve(addr, vfs.clone())?;
    }
    let opts = FuseOptions {
        allow_other: config.allow_other,
        threads: config.fuse_threads.unwrap_or_else(default_fuse_threads),
        waiting_threads: WAITING_THREADS,
        fs_name: config.source().unwrap_or("shardfs").to_string(),
    };
    let mounted = fuse::mount(vfs, mnt, &opts)
        .with_context(|| format!("cannot mount at {}", mnt.display()))?;
    Ok((mounted, summary))
}

/// `mounted SOURCE at MNT: N samples, rank-R.. (K ranks), epoch-E.. listed`.
fn summary(config: &MountConfig, vfs: &Vfs, world_ranks: u64) -> String {
    let what = match config.source() {
        Some(s) => s.to_string(),
        None => format!("{} streams", config.ordering.streams.len()),
    };
    let c = vfs.config();
    let ranks = match c.global_ranks.as_slice() {
        [] => "no rank".to_string(),
        [r] => format!("rank-{r}"),
        [first, .., last] => format!("rank-{first} to rank-{last}"),
    };
    let first = c.first_epoch_listed;
    let epochs = match c.epochs_listed {
        1 => format!("epoch-{first}"),
        n => format!("epoch-{first} to epoch-{}", first + n - 1),
    };
    format!(
        "mounted {what} at {}: {} samples; {ranks} of {world_ranks} rank{}; {epochs} listed",
        config.mountpoint().display(),
        vfs.num_samples(),
        if world_ranks == 1 { "" } else { "s" },
    )
}

fn check_mountpoint(mnt: &Path) -> Result<()> {
    match std::fs::metadata(mnt) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!("mountpoint {} is not a directory", mnt.display()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            bail!(
                "mountpoint {} is a stale mount (run `shardfs unmount {}`)",
                mnt.display(),
                mnt.display()
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("mountpoint {} does not exist", mnt.display())
        }
        Err(e) => bail!("mountpoint {}: {e}", mnt.display()),
    }
    if is_mountpoint(mnt) {
        bail!(
            "mountpoint {} is busy: something is already mounted there",
            mnt.display()
        );
    }
    Ok(())
}

fn check_dev_fuse() -> Result<()> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("no /dev/fuse: load the fuse kernel module (modprobe fuse) or give the container the device (--device /dev/fuse)")
        }
        // Unprivileged users mount through fusermount3, which opens the device itself.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            if which("fusermount3").is_none() {
                bail!("/dev/fuse is not accessible and fusermount3 is missing (install the fuse3 package)");
            }
            Ok(())
        }
        Err(e) => bail!("/dev/fuse: {e}"),
    }
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.is_file())
}

/// One stream opened: its index, the raw index.json bytes and its shard cache.
struct OpenedStream {
    index: Arc<mds::Index>,
    index_json: Vec<u8>,
    cache: Arc<ShardCache>,
}

/// Connections a mount opens to its store at most: two per shard fetch in flight.
fn connections(config: &MountConfig) -> usize {
    config.fetch_concurrency.max(1) * 2
}

fn store_options(config: &MountConfig) -> StoreOptions {
    StoreOptions {
        max_concurrency: connections(config),
        part_size: config.fetch_part_size,
        ..config.store.options()
    }
}

/// The default of `--memory-limit`.
const DEFAULT_MEMORY_LIMIT: u64 = 256 << 20;

/// How one stream's share of `--memory-limit` is split between shards being downloaded and
/// the memory tier: `(tier, downloads)`. Downloads want two parts per connection: one for the
/// downloads in flight, one for shards that arrived and are being checked and written, so the
/// connections do not sit idle meanwhile (measured 2026-11-26: with the budget at one part per
/// connection only two 64 MiB shards were ever in flight; at two, cold reads rose 17-21 %;
/// whole-shard GETs, part size 0, want no bound of their own) and get at most half of the
/// share (a shard
/// larger than that downloads alone); the tier takes the rest. A share of 0 turns the tier off
/// and leaves downloads what they want (0: no bound, as [`CacheOptions::download_memory`] says).
fn memory_split(share: u64, connections: usize, part_size: u64) -> (u64, u64) {
    let wanted = wanted_download_memory(connections, part_size);
    if share == 0 {
        return (0, wanted);
    }
    let half = share / 2;
    let downloads = if wanted == 0 { half } else { wanted.min(half) }.max(1);
    (share - downloads, downloads)
}

/// How much more than their own share downloads may borrow from the memory tier's share while
/// the tier leaves it unused (a cold start, when readers wait for whole shards and nothing is
/// in memory yet): up to the two parts per connection they want (see [`memory_split`]), at
/// most the tier's whole share. So at the default 256 MiB limit a cold start downloads four
/// 64 MiB shards at a time instead of two, and `--memory-limit` still bounds the sum.
fn download_loan(tier: u64, downloads: u64, connections: usize, part_size: u64) -> u64 {
    if tier == 0 || downloads == 0 {
        return 0;
    }
    wanted_download_memory(connections, part_size)
        .saturating_sub(downloads)
        .min(tier)
}

/// What downloads in parts want: two parts per connection (0 for whole-shard GETs).
fn wanted_download_memory(connections: usize, part_size: u64) -> u64 {
    (connections as u64)
        .saturating_mul(part_size)
        .saturating_mul(2)
}

/// The cache settings of one of `streams` streams: each gets an equal share of the disk and
/// memory limits, so the mount as a whole stays within them.
fn cache_options(config: &MountConfig, cache_limit: Option<u64>, streams: u64) -> CacheOptions {
    let share = config.memory_limit.unwrap_or(DEFAULT_MEMORY_LIMIT) / streams.max(1);
    let (memory_limit, download_memory) =
        memory_split(share, connections(config), config.fetch_part_size);
    CacheOptions {
        download_loan: download_loan(
            memory_limit,
            download_memory,
            connections(config),
            config.fetch_part_size,
        ),
        cache_dir: config.cache_dir(),
        cache_limit,
        memory_limit,
        download_memory,
        ..CacheOptions::default()
    }
}

fn open_stream(
    config: &MountConfig,
    source: &str,
    opts: CacheOptions,
    next_use: Arc<NextUse>,
    first_shard: u32,
) -> Result<OpenedStream> {
    let dataset = Dataset::load(source, &store_options(config))
        .with_context(|| format!("cannot read index.json of {source}"))?;
    let index = dataset.index().clone();
    let index_json = dataset.index_bytes().to_vec();
    let policy = Arc::new(FurthestNextUse::new(next_use, first_shard));
    let cache =
        ShardCache::open_with_policy(Arc::new(dataset), opts, policy).with_context(|| {
            format!(
                "cannot open the cache for {source} in {}",
                config.cache_dir().display()
            )
        })?;
    Ok(OpenedStream {
        index,
        index_json,
        cache,
    })
}

/// Opens every stream, builds the plan and the vfs; also gives the world's rank count.
fn open_vfs(config: &MountConfig) -> Result<(Arc<Vfs>, u64)> {
    let resolved = config.ordering.resolve(config.source())?;
    let streams = resolved.streams.len().max(1) as u64;
    let per_stream_limit = config.cache_limit.map(|l| l / streams);
    // The plan's next-use table: the readahead's planner fills it, every stream's eviction
    // policy reads it.
    let next_use = Arc::new(NextUse::new());
    let mut opened = Vec::new();
    let mut first_shard = 0u32;
    for s in &resolved.streams {
        let o = open_stream(
            config,
            &s.source,
            cache_options(config, per_stream_limit, streams),
            next_use.clone(),
            first_shard,
        )?;
        first_shard += o.index.shards().len() as u32;
        opened.push(o);
    }
    let planner = resolved.planner(opened.iter().map(|o| o.index.shard_samples()))?;
    let world = resolved.world;
    let node = resolved.node_rank;
    // A resumed job reads on from the resumed epoch: list from there.
    let first_epoch = planner.resume_point().map_or(0, |(epoch, _)| epoch);
    if let Some(limit) = per_stream_limit {
        warn_if_cache_too_small(&resolved.streams, &opened, limit, world.ranks_per_node);
    }
    let global_ranks: Vec<u64> = (0..world.ranks_per_node)
        .map(|l| node * world.ranks_per_node + l)
        .collect();
    // index.json at the root: the dataset's own for one stream; for several, the first
    // stream's (each stream keeps its own index in its source).
    let index_json = opened
        .first()
        .map(|o| o.index_json.clone())
        .unwrap_or_default();
    let caches: Vec<Arc<ShardCache>> = opened.iter().map(|o| o.cache.clone()).collect();
    let dataset = Arc::new(MdsDataset::new(
        opened
            .into_iter()
            .map(|o| {
                let store: Arc<dyn crate::vfs::ShardStore> = Arc::new(CachedShards(o.cache));
                (o.index, store)
            })
            .collect(),
    ));
    let map = dataset.map().clone();
    let orders = Arc::new(OrderCache::new(
        Box::new(PlannerOrders { planner, node }),
        MIN_KEEP_EPOCHS,
    ));
    // Readahead may cover most of the disk budget; without a limit, a generous window.
    let budget = config.cache_limit.map(|l| l / 10 * 8).unwrap_or(8 << 30);
    let readahead = Arc::new(Readahead::new(
        orders.clone(),
        next_use,
        Arc::new(CachedStreams::new(map.clone(), caches)),
        global_ranks.len(),
        ReadaheadOptions {
            budget_bytes: budget,
            max_fetches: config.fetch_concurrency,
            stream_starts: map.stream_starts(),
            // `--epochs N` (N > 1) says how many epochs the job reads; the default of 1
            // says nothing, so readahead then runs into the next epoch as usual.
            last_epoch: (config.epochs > 1).then(|| first_epoch + config.epochs - 1),
            ..Default::default()
        },
    ));
    let vfs = Vfs::new(
        dataset,
        readahead,
        orders,
        index_json,
        VfsConfig {
            global_ranks,
            epochs_listed: config.epochs,
            first_epoch_listed: first_epoch,
        },
    );
    let vfs = Arc::new(vfs);
    vfs.ready_first_listings();
    Ok((vfs, world.nodes.saturating_mul(world.ranks_per_node)))
}

/// Warns when a stream's share of the cache cannot hold two shards per local rank: readers
/// then wait on each other's shards and readahead can fetch little ahead of them.
fn warn_if_cache_too_small(
    streams: &[StreamArg],
    opened: &[OpenedStream],
    limit: u64,
    ranks_per_node: u64,
) {
    for (s, o) in streams.iter().zip(opened) {
        let largest = o
            .index
            .shards()
            .iter()
            .map(|e| e.raw.bytes)
            .max()
            .unwrap_or(0);
        let wanted = ranks_per_node.saturating_mul(2).saturating_mul(largest);
        if limit < wanted {
            tracing::warn!(
                stream = %s.source,
                cache_limit = limit,
                ranks_per_node,
                largest_shard = largest,
                wanted,
                "the cache limit is below ranks per node x 2 x the largest shard: reads may \
                 wait for downloads and fail when the cache is full; raise --cache-limit"
            );
        }
    }
}

/// Rank orders from StreamingDataset's plan, for this node's ranks.
struct PlannerOrders {
    planner: Planner,
    node: u64,
}

impl OrderSource for PlannerOrders {
    fn node_orders(&self, epoch: u64) -> Result<Vec<Vec<u64>>, OrderError> {
        self.planner.node_orders(epoch, self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        config: MountConfig,
    }

    fn config(args: &[&str]) -> MountConfig {
        let argv = ["t", "s3://b/data", "/mnt"].iter().chain(args.iter());
        match Wrapper::try_parse_from(argv) {
            Ok(w) => w.config,
            Err(e) => panic!("{e}"),
        }
    }

    /// Memory the mount's caches may hold: every stream's tier and downloads.
    fn total(config: &MountConfig, streams: u64) -> u64 {
        let o = cache_options(config, None, streams);
        streams * (o.memory_limit + o.download_memory)
    }

    #[test]
    fn the_memory_limit_bounds_downloads_and_the_tier_together() {
        // Defaults: 16 connections x 8 MiB parts = 128 MiB of downloads, half of 256 MiB.
        let c = config(&[]);
        let o = cache_options(&c, None, 1);
        assert_eq!((o.memory_limit, o.download_memory), (128 << 20, 128 << 20));
        for streams in 1..=3 {
            assert!(
                total(&c, streams) <= DEFAULT_MEMORY_LIMIT,
                "{streams} streams"
            );
        }
        // A small limit: downloads are cut to half of it, not left at one part per connection.
        let c = config(&["--memory-limit", "64MiB"]);
        let o = cache_options(&c, None, 1);
        assert_eq!((o.memory_limit, o.download_memory), (32 << 20, 32 << 20));
        assert!(total(&c, 2) <= 64 << 20);
        // A large one: downloads need no more than two parts per connection; the tier gets
        // the rest.
        let c = config(&["--memory-limit", "1GiB", "--fetch-concurrency", "2"]);
        let o = cache_options(&c, None, 1);
        assert_eq!(o.download_memory, 2 * 4 * (8 << 20));
        let c = config(&["--memory-limit", "1GiB"]);
        assert_eq!(cache_options(&c, None, 1).download_memory, 256 << 20);
        assert_eq!(o.memory_limit + o.download_memory, 1 << 30);
    }

    #[test]
    fn downloads_borrow_up_to_what_they_want_from_the_tier_and_no_more() {
        // Defaults: 128 MiB of their own, 256 MiB wanted: 128 MiB may be borrowed.
        let o = cache_options(&config(&[]), None, 1);
        assert_eq!(o.download_loan, 128 << 20);
        // A small limit: at most the tier's whole share.
        let o = cache_options(&config(&["--memory-limit", "16MiB"]), None, 1);
        assert_eq!(
            (o.memory_limit, o.download_memory, o.download_loan),
            (8 << 20, 8 << 20, 8 << 20)
        );
        // A large one: downloads have what they want already.
        let o = cache_options(&config(&["--memory-limit", "1GiB"]), None, 1);
        assert_eq!(o.download_loan, 0);
        // No tier to borrow from; whole-shard GETs want no bound of their own.
        let o = cache_options(&config(&["--memory-limit", "0"]), None, 1);
        assert_eq!(o.download_loan, 0);
        let o = cache_options(&config(&["--fetch-part-size", "0"]), None, 1);
        assert_eq!(o.download_loan, 0);
    }

    #[test]
    fn a_memory_limit_of_zero_turns_the_tier_off_but_still_downloads() {
        let c = config(&["--memory-limit", "0", "--fetch-part-size", "1MiB"]);
        let o = cache_options(&c, None, 2);
        assert_eq!((o.memory_limit, o.download_memory), (0, 32 << 20));
        assert_eq!(memory_split(0, 4, 0), (0, 0));
        assert_eq!(memory_split(1, 4, 1 << 20), (0, 1));
    }

    #[test]
    fn whole_shard_downloads_get_half_of_the_limit_not_one_byte() {
        // --fetch-part-size 0: one GET per shard, bounded only by the fetch concurrency and
        // half of the memory limit (a budget of 1 byte would download one shard at a time).
        let c = config(&["--fetch-part-size", "0"]);
        let o = cache_options(&c, None, 1);
        assert_eq!((o.memory_limit, o.download_memory), (128 << 20, 128 << 20));
        let c = config(&["--fetch-part-size", "0", "--memory-limit", "0"]);
        assert_eq!(cache_options(&c, None, 1).download_memory, 0);
    }
}
