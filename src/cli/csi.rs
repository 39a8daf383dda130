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
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(csi::serve(config))
        .context("the CSI node plugin stopped")
}
