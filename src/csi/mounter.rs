//! The mount operations of the node plugin: `shardfs mount` / `shardfs unmount` of this same
//! binary for datasets (the one mount code path), read-only bind mounts for publishing a
//! staged volume, and checks on what is mounted where.
//!
//! `shardfs mount` starts its daemon in a new session (setsid), so the daemons are not in the
//! plugin's process group; with a [`DaemonCgroup`] they are not in its container's cgroup
//! either, so a container restart leaves them serving. See docs/KUBERNETES.md.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::host_cgroup::DaemonCgroup;
use super::host_network::HostNetwork;

/// The variable `shardfs mount`/`unmount` read for where daemon records live.
const RUNTIME_DIR_ENV: &str = "SHARDFS_RUNTIME_DIR";

/// Why a mount operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// `shardfs mount` reported an error (bad credentials, no index.json, …): its message.
    #[error("{0}")]
    Failed(String),
    /// `shardfs mount` did not answer in time; it was killed.
    #[error("shardfs mount did not finish within {0:?}")]
    Timeout(Duration),
    /// A system call or process start failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MountError {
    let what = what.into();
    move |source| MountError::Io { what, source }
}

/// Runs the dataset mounts of one plugin.
#[derive(Debug, Clone)]
pub struct Mounter {
    /// The `shardfs` executable (this binary).
    pub exe: PathBuf,
    /// How long `shardfs mount` may take before it is killed.
    pub timeout: Duration,
    /// The host cgroup daemons start in (None: the plugin's own).
    pub cgroup: Option<DaemonCgroup>,
    /// The host network namespace daemons start in (None: the plugin's own).
    pub network: Option<HostNetwork>,
    /// Where daemons record their pid and exit (`SHARDFS_RUNTIME_DIR`): in the state dir on
    /// the host, so a restarted plugin's `shardfs unmount` finds the records of the old one.
    pub runtime_dir: PathBuf,
}

impl Mounter {
    /// `shardfs mount SOURCE TARGET --cache-dir CACHE --allow-other FLAGS…` with `env` added
    /// and the variables named in `scrub` removed.
    pub async fn mount(
        &self,
        source: &str,
        target: &Path,
        cache_dir: &Path,
        flags: &[String],
        env: &BTreeMap<String, String>,
        scrub: &[&str],
    ) -> Result<(), MountError> {
        let mut cmd = tokio::process::Command::new(&self.exe);
        for var in scrub {
            cmd.env_remove(var);
        }
        cmd.arg("mount")
            .arg(source)
            .arg(target)
            .arg("--cache-dir")
            .arg(cache_dir)
            .arg("--allow-other")
            .args(flags)
            .envs(env)
            .env(RUNTIME_DIR_ENV, &self.runtime_dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let what = match &self.cgroup {
            Some(cg) => format!(
                "cannot start shardfs mount in the daemon cgroup {:?}",
                cg.dirs()
            ),
            None => "cannot start shardfs mount".to_string(),
        };
        if let Some(cg) = &self.cgroup {
            cg.apply(&mut cmd);
        }
        if let Some(net) = &self.network {
            net.apply(&mut cmd);
        }
        let child = cmd.spawn().map_err(io(what))?;
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(out) => out.map_err(io("shardfs mount"))?,
            Err(_) => return Err(MountError::Timeout(self.timeout)),
        };
        if out.status.success() {
            return Ok(());
        }
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let msg = msg.strip_prefix("shardfs: ").unwrap_or(&msg).to_string();
        Err(MountError::Failed(if msg.is_empty() {
            format!("shardfs mount exited with {}", out.status)
        } else {
            msg
        }))
    }

    /// `shardfs unmount TARGET` (waits for the daemon); a dead mount is detached instead.
    pub async fn unmount_daemon(&self, target: &Path) -> Result<(), MountError> {
        let out = tokio::process::Command::new(&self.exe)
            .arg("unmount")
            .arg(target)
            .arg("--timeout")
            .arg("30")
            .env(RUNTIME_DIR_ENV, &self.runtime_dir)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(io("cannot run shardfs unmount"))?;
        if out.status.success() || !is_mountpoint(target) {
            return Ok(());
        }
        tracing::warn!(
            target = %target.display(),
            error = %String::from_utf8_lossy(&out.stderr).trim(),
            "shardfs unmount failed; detaching lazily"
        );
        detach(target, libc::MNT_DETACH)
    }
}

fn cpath(p: &Path) -> Result<CString, MountError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| MountError::Io {
        what: format!("path {} contains a NUL byte", p.display()),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}

/// Bind-mounts `from` at `to`, read-only.
pub fn bind_read_only(from: &Path, to: &Path) -> Result<(), MountError> {
    let (src, dst) = (cpath(from)?, cpath(to)?);
    // SAFETY: valid NUL-terminated paths; null fstype/data are allowed for bind mounts.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io(format!(
            "cannot bind {} at {}",
            from.display(),
            to.display()
        ))(std::io::Error::last_os_error()));
    }
    // SAFETY: as above; remounting the new bind mount read-only.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let _ = detach(to, libc::MNT_DETACH);
        return Err(io(format!("cannot make {} read-only", to.display()))(e));
    }
    Ok(())
}

/// Unmounts `p` (`flags`: 0 or `MNT_DETACH`).
pub fn detach(p: &Path, flags: libc::c_int) -> Result<(), MountError> {
    let c = cpath(p)?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) && !is_mountpoint(p) {
            return Ok(());
        }
        return Err(io(format!("cannot unmount {}", p.display()))(e));
    }
    Ok(())
}

/// Whether `p` is the mount point of a mounted filesystem (per /proc/self/mountinfo).
pub fn is_mountpoint(p: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let target = p
        .to_string_lossy()
        .trim_end_matches('/')
        .replace(' ', "\\040");
    info.lines().any(|l| l.split(' ').nth(4) == Some(&target))
}

/// Whether the filesystem at `p` answers (a FUSE mount whose daemon died gives ENOTCONN).
pub fn answers(p: &Path) -> bool {
    std::fs::metadata(p.join("index.json")).is_ok()
}
