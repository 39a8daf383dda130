//! `csi`: the Kubernetes CSI node plugin (gRPC on a unix socket, no Controller service).
//!
//! A volume is a dataset: its attributes are `source` plus any `shardfs mount` option
//! ([`attributes`]). A PersistentVolume is staged once per node — one `shardfs mount` daemon,
//! one cache, each shard fetched once per node — and bind-mounted read-only into each pod; an
//! inline (ephemeral) volume is mounted straight at the pod's path. Mounts are made by running
//! this same binary's `shardfs mount` ([`mounter`]), whose daemons live in their own sessions
//! and outlive the plugin; [`state`] records let a restarted plugin re-adopt and unpublish them.

pub mod attributes;
mod authority;
pub mod cache_budget;
pub mod host_cgroup;
pub mod host_network;
pub mod identity;
pub mod inline;
pub mod mounter;
pub mod node;
pub mod pod_identity;
pub mod state;

/// The generated CSI v1 protocol types, clients and servers (from `proto/csi.proto`).
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("csi.v1");
}

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Why the plugin could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    /// The endpoint is not `unix:///path`.
    #[error("endpoint {0:?} is not a unix socket URL (unix:///path/csi.sock)")]
    Endpoint(String),
    /// A folder or the socket could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The host cgroup for daemons could not be prepared.
    #[error("daemon cgroup: {0}")]
    Cgroup(#[from] host_cgroup::CgroupError),
    /// The host's network namespace could not be opened.
    #[error(transparent)]
    Network(#[from] host_network::NetworkError),
    /// The plugin is PID 1 of its own PID namespace: its daemons would die with it.
    #[error("--host-cgroupfs is set but the plugin is PID 1 of its own PID namespace, so its mount daemons would die with the container: run the DaemonSet with hostPID: true")]
    PrivatePidNamespace,
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Server(#[from] tonic::transport::Error),
}

/// Settings of one plugin process.
#[derive(Debug, Clone)]
pub struct CsiConfig {
    /// `unix:///path/csi.sock`.
    pub endpoint: String,
    /// This node's id.
    pub node_id: String,
    /// The driver name.
    pub driver_name: String,
    /// Per-volume caches go under this folder.
    pub cache_root: PathBuf,
    /// Mount records go here (keep it on the host, so it survives the plugin's container).
    pub state_dir: PathBuf,
    /// Longest a mount may take.
    pub mount_timeout: Duration,
    /// The `shardfs` executable that mounts (normally this one).
    pub exe: PathBuf,
    /// The long options of `shardfs mount`, to validate volume attributes.
    pub known_flags: Vec<String>,
    /// Test only (csi-sanity with a stub controller): report CONTROLLER_SERVICE.
    pub advertise_controller_service: bool,
    /// The host's cgroup filesystem as mounted in the plugin's container: daemons are moved
    /// into a cgroup there so a container restart does not kill them (None: they are not).
    pub host_cgroupfs: Option<PathBuf>,
    /// The name of the daemons' cgroup in each hierarchy.
    pub daemon_cgroup: String,
    /// The host's cgroup namespace (PID 1's with hostPID).
    pub host_cgroup_namespace: PathBuf,
    /// The host's network namespace the daemons start in, with `host_cgroupfs` (PID 1's).
    pub host_network_namespace: PathBuf,
    /// Limits on the daemons' host cgroup.
    pub daemon_limits: host_cgroup::CgroupLimits,
    /// Which inline (ephemeral) volumes are allowed.
    pub inline_policy: inline::InlinePolicy,
    /// The node-wide budget of all caches under `cache_root`.
    pub cache_budget: cache_budget::Amount,
    /// The cacheLimit of a volume that gives none.
    pub default_cache_limit: cache_budget::Amount,
}

/// The socket path of a `unix://` endpoint (`unix:///a/b` and `unix:/a/b`).
pub fn socket_path(endpoint: &str) -> Result<PathBuf, CsiError> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| CsiError::Endpoint(endpoint.to_string()))?;
    Ok(PathBuf::from(path))
}

/// Serves the Identity and Node services on the configured socket until SIGINT/SIGTERM.
pub async fn serve(config: CsiConfig) -> Result<(), CsiError> {
    let io = |what: String| move |source| CsiError::Io { what, source };
    let socket = socket_path(&config.endpoint)?;
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("cannot create {}", dir.display())))?;
    }
    match std::fs::remove_file(&socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io(format!(
                "cannot remove the old socket {}",
                socket.display()
            ))(e))
        }
        _ => {}
    }
    std::fs::create_dir_all(&config.cache_root).map_err(io(format!(
        "cannot create the cache root {}",
        config.cache_root.display()
    )))?;
    let state = state::StateDir::open(&config.state_dir).map_err(io(format!(
        "cannot create the state dir {}",
        config.state_dir.display()
    )))?;
    readopt(&state);
    let (cgroup, network) = match &config.host_cgroupfs {
        Some(root) => {
            if std::process::id() == 1 {
                return Err(CsiError::PrivatePidNamespace);
            }
            let cg = host_cgroup::DaemonCgroup::prepare(
                root,
                &config.daemon_cgroup,
                &config.host_cgroup_namespace,
                &config.daemon_limits,
            )?;
            tracing::info!(cgroups = ?cg.dirs(), limits = ?config.daemon_limits, "mount daemons start in the host cgroup, outside this container's");
            let net = host_network::HostNetwork::open(&config.host_network_namespace)?;
            match &net {
                Some(_) => tracing::info!(namespace = %config.host_network_namespace.display(), "mount daemons start in the host's network namespace, so they keep their network when this pod goes"),
                None => tracing::info!("the plugin is in the host's network namespace (hostNetwork): so are its mount daemons"),
            }
            (Some(cg), net)
        }
        None => {
            tracing::warn!("no --host-cgroupfs: mount daemons share this process's cgroup and network, so restarting the plugin's container stops them (fine outside a container)");
            (None, None)
        }
    };
    let disk = statvfs_size(&config.cache_root).map_err(io(format!(
        "cannot read the size of the filesystem of {}",
        config.cache_root.display()
    )))?;
    let budget = cache_budget::CacheBudget::new(
        &config.cache_root,
        config.cache_budget.bytes(disk),
        config.default_cache_limit.bytes(disk),
    );
    tracing::info!(cache_root = %config.cache_root.display(), filesystem_bytes = disk, budget_bytes = budget.total, default_cache_limit = budget.default_limit, inline = ?config.inline_policy, "cache budget");
    let listener = tokio::net::UnixListener::bind(&socket)
        .map_err(io(format!("cannot listen on {}", socket.display())))?;
    let node = node::NodeService {
        node_id: config.node_id.clone(),
        cache_root: config.cache_root.clone(),
        known_flags: Arc::new(config.known_flags.clone()),
        mounter: mounter::Mounter {
            exe: config.exe.clone(),
            timeout: config.mount_timeout,
            cgroup,
            network,
            runtime_dir: config.state_dir.join("daemons"),
        },
        state,
        locks: Default::default(),
        inline_policy: config.inline_policy.clone(),
        budget: Arc::new(budget),
        tokens_dir: config.state_dir.clone(),
    };
    let identity = identity::IdentityService {
        driver_name: config.driver_name.clone(),
        advertise_controller_service: config.advertise_controller_service,
    };
    tracing::info!(socket = %socket.display(), node = %config.node_id, driver = %config.driver_name, "CSI node plugin serving");
    tonic::transport::Server::builder()
        .add_service(proto::identity_server::IdentityServer::new(identity))
        .add_service(proto::node_server::NodeServer::new(node))
        .serve_with_incoming_shutdown(
            {
                use tokio_stream::StreamExt;
                // Any client's `:authority` is accepted (authority.rs says why).
                tokio_stream::wrappers::UnixListenerStream::new(listener)
                    .map(|c| c.map(authority::AuthorityFix::new))
            },
            shutdown(),
        )
        .await?;
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

/// The size in bytes of the filesystem holding `dir`.
fn statvfs_size(dir: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: statvfs is plain data; c is a valid NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.f_blocks as u64).saturating_mul(st.f_frsize as u64))
}

/// Logs the volumes a previous plugin process left mounted: their daemons keep serving, and
/// the records let this process answer repeated publishes and unpublish them.
fn readopt(state: &state::StateDir) {
    let records = state.all();
    let live = records
        .iter()
        .filter(|r| mounter::is_mountpoint(&r.path) && mounter::answers(&r.path))
        .count();
    if !records.is_empty() {
        tracing::info!(
            volumes = records.len(),
            serving = live,
            "re-adopted the mounts of an earlier plugin process"
        );
    }
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!("stopping on signal; published volumes stay mounted");
}
