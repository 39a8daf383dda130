//! `shardfs csi`: runs the Kubernetes CSI node plugin (see docs/KUBERNETES.md).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::CommandFactory;

use super::Cli;
use crate::csi::{self, CsiConfig};

/// Arguments of `shardfs csi`.
#[derive(Debug, clap::Args)]
pub struct CsiArgs {
    /// The gRPC endpoint kubelet talks to.
    #[arg(long, env = "CSI_ENDPOINT", default_value = "unix:///csi/csi.sock")]
    pub endpoint: String,
    /// This node's name (the DaemonSet passes spec.nodeName).
    #[arg(long, env = "CSI_NODE_ID")]
    pub node_id: String,
    /// The CSI driver name volumes refer to.
    #[arg(long, default_value = "csi.shardfs.dev")]
    pub driver_name: String,
    /// Folder on the node's local disk under which each volume gets its shard cache.
    #[arg(long, value_name = "DIR", default_value = "/var/cache/shardfs")]
    pub cache_root: PathBuf,
    /// Folder (on the host) where the plugin records its mounts, to re-adopt them after a restart.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/shardfs-csi")]
    pub state_dir: PathBuf,
    /// Seconds a mount may take (opening the dataset, planning) before it fails.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub mount_timeout: u64,
    /// TEST ONLY: report a Controller service that a separate stub serves, so csi-sanity runs
    /// its whole Node suite (tests/csi_sanity/run.sh). shardfs itself has no Controller.
    #[arg(long, hide = true)]
    pub advertise_controller_service: bool,
    /// The host's /sys/fs/cgroup as mounted in the plugin's container (a hostPath, e.g.
    /// /host/sys/fs/cgroup). Mount daemons then start in a cgroup of the host, so restarting
    /// or upgrading the plugin's pod leaves them serving. Needs hostPID: true.
    #[arg(long, value_name = "DIR")]
    pub host_cgroupfs: Option<PathBuf>,
    /// Name of the daemons' cgroup, created in every hierarchy under --host-cgroupfs.
    #[arg(long, value_name = "NAME", default_value = "shardfs")]
    pub daemon_cgroup: String,
    /// The host's cgroup namespace, entered to move daemons on cgroup v2 (with hostPID,
    /// PID 1's).
    #[arg(long, value_name = "PATH", default_value = "/proc/1/ns/cgroup")]
    pub host_cgroup_namespace: PathBuf,
    /// The host's network namespace, which mount daemons enter with --host-cgroupfs so they
    /// keep their network when the plugin's pod is deleted (with hostPID, PID 1's).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/proc/1/ns/net",
        overrides_with = "host_network_namespace"
    )]
    pub host_network_namespace: PathBuf,
    /// memory.max of the daemons' host cgroup (all mount daemons of the node together), e.g.
    /// 16GiB. Needs --host-cgroupfs.
    #[arg(long, value_name = "BYTES", requires = "host_cgroupfs", value_parser = crate::size::parse_size, overrides_with = "daemon_memory_max")]
    pub daemon_memory_max: Option<u64>,
    /// CPU weight of the daemons' host cgroup (cpu.weight 1-10000, 100 = a default share;
    /// cpu.shares on cgroup v1). Needs --host-cgroupfs.
    #[arg(long, value_name = "WEIGHT", requires = "host_cgroupfs", value_parser = clap::value_parser!(u64).range(1..=10000), overrides_with = "daemon_cpu_weight")]
    pub daemon_cpu_weight: Option<u64>,
    /// Inline (ephemeral) volumes, which any pod author writes: `off` (PersistentVolumes
    /// only), `own-credentials` (only those using the pod's identity, a secret, or
    /// noSignRequest), `any` (also with the plugin's own credentials).
    #[arg(long, value_name = "POLICY", default_value = "off", value_parser = ["off", "own-credentials", "any"], overrides_with = "inline_volumes")]
    pub inline_volumes: String,
    /// A host on the node itself (loopback, link-local) that inline volumes may still name as
    /// their store, because the operator serves one there (repeatable).
    #[arg(long, value_name = "HOST")]
    pub inline_allow_host: Vec<String>,
    /// The most all volumes' caches under --cache-root may hold together (their cacheLimits
    /// add up to at most this): bytes (2TiB) or a share of the filesystem (50%).
    #[arg(long, value_name = "SIZE|PERCENT", default_value = "50%", value_parser = csi::cache_budget::Amount::parse, overrides_with = "cache_budget")]
    pub cache_budget: csi::cache_budget::Amount,
    /// The cacheLimit of a volume that sets none: bytes or a share of the cache filesystem.
    /// (These plugin flags may be repeated, the last one wins, so an overlay can append.)
    #[arg(long, value_name = "SIZE|PERCENT", default_value = "10%", value_parser = csi::cache_budget::Amount::parse, overrides_with = "default_cache_limit")]
    pub default_cache_limit: csi::cache_budget::Amount,
}

/// The long options of `shardfs mount`: the names volume attributes may use.
pub fn mount_flag_names() -> Vec<String> {
    let cmd = Cli::command();
    let Some(mount) = cmd.find_subcommand("mount") else {
        return Vec::new();
    };
    mount
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

/// Runs `shardfs csi` until SIGTERM.
pub fn run(args: CsiArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the shardfs executable")?;
    let config = CsiConfig {
        endpoint: args.endpoint,
        node_id: args.node_id,
        driver_name: args.driver_name,
        cache_root: args.cache_root,
        state_dir: args.state_dir,
        mount_timeout: Duration::from_secs(args.mount_timeout.max(1)),
        exe,
        known_flags: mount_flag_names(),
        advertise_controller_service: args.advertise_controller_service,
        host_cgroupfs: args.host_cgroupfs,
        daemon_cgroup: args.daemon_cgroup,
        host_cgroup_namespace: args.host_cgroup_namespace,
        host_network_namespace: args.host_network_namespace,
        daemon_limits: csi::host_cgroup::CgroupLimits {
            memory_max: args.daemon_memory_max,
            cpu_weight: args.daemon_cpu_weight,
        },
        inline_policy: csi::inline::InlinePolicy {
            mode: match args.inline_volumes.as_str() {
                "any" => csi::inline::InlineVolumes::Any,
                "own-credentials" => csi::inline::InlineVolumes::OwnCredentials,
                _ => csi::inline::InlineVolumes::Off,
            },
            node_hosts: args.inline_allow_host,
        },
        cache_budget: args.cache_budget,
        default_cache_limit: args.default_cache_limit,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(csi::serve(config))
        .context("the CSI node plugin stopped")
}
