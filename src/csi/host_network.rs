//! Starts the mount daemons in the host's network namespace, so they keep reaching the store
//! after the plugin's pod (and with it the pod's network) is deleted.
//!
//! A DaemonSet pod without `hostNetwork` has a network namespace of its own, which the CNI
//! plugin tears down (interfaces, address, routes) when the pod is deleted: a daemon left in it
//! by a rollout could then read only what its cache held. Like the cgroup move of
//! [`super::host_cgroup`], the `shardfs mount` process enters the host's network namespace
//! (PID 1's, with `hostPID: true`) between fork and exec; the daemon it starts inherits it. A
//! plugin that runs with `hostNetwork: true` is in that namespace already, and nothing is done.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the host's network namespace cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the host's network namespace {path}: {source} (the DaemonSet needs hostPID: true and a privileged container)")]
pub struct NetworkError {
    /// The namespace file.
    pub path: PathBuf,
    /// The OS error.
    pub source: std::io::Error,
}

/// The host's network namespace, held open for the plugin's life.
#[derive(Debug, Clone)]
pub struct HostNetwork {
    ns: Arc<OwnedFd>,
}

impl HostNetwork {
    /// Opens the namespace at `path` (e.g. `/proc/1/ns/net`); None when the plugin is in it.
    pub fn open(path: &Path) -> Result<Option<HostNetwork>, NetworkError> {
        let err = |source| NetworkError {
            path: path.to_path_buf(),
            source,
        };
        let own = std::fs::metadata("/proc/self/ns/net").map_err(err)?;
        let file = std::fs::File::open(path).map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        if meta.ino() == own.ino() && meta.dev() == own.dev() {
            return Ok(None);
        }
        Ok(Some(HostNetwork {
            ns: Arc::new(OwnedFd::from(file)),
        }))
    }

    /// Makes `cmd`'s process enter the host's network namespace between fork and exec.
    pub fn apply(&self, cmd: &mut tokio::process::Command) {
        let ns = Arc::clone(&self.ns);
        // SAFETY: the closure runs in the forked child before exec and makes one system call
        // on a file descriptor opened before the fork: no allocation, no locks.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}
