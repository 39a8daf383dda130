//! Places the mount daemons the node plugin starts in a cgroup of the host, outside the
//! plugin container's cgroup.
//!
//! A container runtime stops a container by killing every process in the container's cgroup
//! (runc: `cgroup.kill` on cgroup v2, a signal to every pid of the cgroup on v1). Daemons
//! started by the plugin inherit its cgroup, so a plugin restart or upgrade would take every
//! training pod's dataset down with it. Before `shardfs mount` runs, its process joins
//! `HIERARCHY/NAME` in every cgroup hierarchy mounted under the host's cgroup filesystem
//! (`--host-cgroupfs`, a hostPath of `/sys/fs/cgroup`); the daemon it forks inherits that.
//! With `hostPID: true` the daemon is not in a PID namespace that dies with the container, and
//! on cgroup v2 the move is done from the host's cgroup namespace (PID 1's), since the kernel
//! only lets a process move another into a cgroup below its own namespace's root.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the daemon cgroup cannot be prepared.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup filesystem is mounted at or under the given folder.
    #[error(
        "no cgroup filesystem is mounted at or under {0} (mount the host's /sys/fs/cgroup there)"
    )]
    NoHierarchy(PathBuf),
    /// The cgroup name is not a plain relative path.
    #[error("daemon cgroup name {0:?} must be a relative path without '..'")]
    BadName(String),
    /// A limit was asked for but no hierarchy has its controller.
    #[error("--daemon-{0} is set but no cgroup hierarchy under the host's cgroup filesystem can hold that limit")]
    NoController(&'static str),
    /// A file or folder of the cgroup filesystem could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Limits set on the daemons' cgroup: together, every mount daemon of the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupLimits {
    /// `memory.max` (v2) / `memory.limit_in_bytes` (v1), in bytes.
    pub memory_max: Option<u64>,
    /// `cpu.weight` (v2, 1–10000, 100 is the default share) / `cpu.shares` (v1, scaled so
    /// that 100 is 1024).
    pub cpu_weight: Option<u64>,
}

/// Writes `value` to the first of `files` present in `dir` (the v2 name, then the v1 one);
/// on v2, the controller is first enabled in the parent's `cgroup.subtree_control` when the
/// parent offers it. Whether a file was written.
fn write_limit(
    hierarchy: &Path,
    dir: &Path,
    controller: &str,
    v2: (&str, String),
    v1: (&str, String),
) -> Result<bool, CgroupError> {
    let v2_file = dir.join(v2.0);
    if !v2_file.exists() && !dir.join(v1.0).exists() {
        let offered = std::fs::read_to_string(hierarchy.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .any(|c| c == controller);
        if offered {
            let control = hierarchy.join("cgroup.subtree_control");
            std::fs::write(&control, format!("+{controller}"))
                .map_err(io_err("cannot enable a controller in", &control))?;
        }
    }
    for (file, value) in [(v2_file, v2.1), (dir.join(v1.0), v1.1)] {
        if file.exists() {
            std::fs::write(&file, value).map_err(io_err("cannot write", &file))?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Sets `limits` on the daemon cgroup `dir` of one hierarchy: which limits were set.
fn apply_limits(
    hierarchy: &Path,
    dir: &Path,
    limits: &CgroupLimits,
) -> Result<(bool, bool), CgroupError> {
    let memory = match limits.memory_max {
        Some(bytes) => write_limit(
            hierarchy,
            dir,
            "memory",
            ("memory.max", bytes.to_string()),
            ("memory.limit_in_bytes", bytes.to_string()),
        )?,
        None => false,
    };
    let cpu = match limits.cpu_weight {
        Some(w) => {
            let weight = w.clamp(1, 10_000);
            let shares = (weight * 1024 / 100).max(2);
            write_limit(
                hierarchy,
                dir,
                "cpu",
                ("cpu.weight", weight.to_string()),
                ("cpu.shares", shares.to_string()),
            )?
        }
        None => false,
    };
    Ok((memory, cpu))
}

/// The host cgroup the mount daemons join, prepared once when the plugin starts.
#[derive(Debug, Clone)]
pub struct DaemonCgroup {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The host's cgroup namespace, to enter before moving (None when the plugin is in it).
    host_ns: Option<OwnedFd>,
    /// `cgroup.procs` of the daemon cgroup in each hierarchy.
    procs: Vec<CString>,
    /// The daemon cgroup folders, for messages.
    dirs: Vec<PathBuf>,
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError {
    let path = path.to_path_buf();
    move |source| CgroupError::Io { what, path, source }
}

/// Mount points of cgroup (v1) and cgroup2 filesystems at or under `root`, from mountinfo text.
pub fn hierarchies_under(mountinfo: &str, root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS"
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fstype = right.split(' ').next().unwrap_or("");
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let Some(mount_point) = left.split(' ').nth(4) else {
            continue;
        };
        let mount_point = PathBuf::from(unescape_mountinfo(mount_point));
        if mount_point.starts_with(root) && !found.contains(&mount_point) {
            found.push(mount_point);
        }
    }
    found
}

/// mountinfo writes space, tab, newline and backslash in paths as octal escapes (`\040`).
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = bytes.get(i + 1..i + 4);
        if bytes[i] == b'\\' {
            if let Some(digits) = escape.filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b))) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A cgroup v1 cpuset refuses tasks until its cpus and mems are set: copy them from the parent.
fn inherit_cpuset(hierarchy: &Path, dir: &Path) -> Result<(), CgroupError> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let own = dir.join(file);
        let Ok(current) = std::fs::read_to_string(&own) else {
            continue; // not a cpuset hierarchy
        };
        if !current.trim().is_empty() {
            continue;
        }
        let parent = hierarchy.join(file);
        let value = std::fs::read_to_string(&parent).map_err(io_err("cannot read", &parent))?;
        std::fs::write(&own, value.trim()).map_err(io_err("cannot write", &own))?;
    }
    Ok(())
}

impl DaemonCgroup {
    /// Creates `NAME` in every cgroup hierarchy mounted at or under `host_cgroupfs` and opens the
    /// host's cgroup namespace at `host_ns` (PID 1's with `hostPID: true`) when it differs from
    /// the plugin's own, and sets `limits` on it.
    pub fn prepare(
        host_cgroupfs: &Path,
        name: &str,
        host_ns: &Path,
        limits: &CgroupLimits,
    ) -> Result<Self, CgroupError> {
        let relative = Path::new(name);
        if name.is_empty()
            || !relative
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            return Err(CgroupError::BadName(name.to_string()));
        }
        let mountinfo_path = Path::new("/proc/self/mountinfo");
        let mountinfo = std::fs::read_to_string(mountinfo_path)
            .map_err(io_err("cannot read", mountinfo_path))?;
        let hierarchies = hierarchies_under(&mountinfo, host_cgroupfs);
        if hierarchies.is_empty() {
            return Err(CgroupError::NoHierarchy(host_cgroupfs.to_path_buf()));
        }
        let mut procs = Vec::new();
        let mut dirs = Vec::new();
        let (mut memory_set, mut cpu_set) = (false, false);
        for hierarchy in hierarchies {
            let dir = hierarchy.join(name);
            std::fs::create_dir_all(&dir).map_err(io_err("cannot create", &dir))?;
            inherit_cpuset(&hierarchy, &dir)?;
            let (m, c) = apply_limits(&hierarchy, &dir, limits)?;
            memory_set |= m;
            cpu_set |= c;
            let file = dir.join("cgroup.procs");
            let c = CString::new(file.as_os_str().as_bytes()).map_err(|_| CgroupError::Io {
                what: "bad path",
                path: file.clone(),
                source: std::io::ErrorKind::InvalidInput.into(),
            })?;
            procs.push(c);
            dirs.push(dir);
        }
        if limits.memory_max.is_some() && !memory_set {
            return Err(CgroupError::NoController("memory-max"));
        }
        if limits.cpu_weight.is_some() && !cpu_set {
            return Err(CgroupError::NoController("cpu-weight"));
        }
        let host_ns = open_foreign_namespace(host_ns)?;
        Ok(DaemonCgroup {
            inner: Arc::new(Inner {
                host_ns,
                procs,
                dirs,
            }),
        })
    }

    /// The daemon cgroup folders, one per hierarchy.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.inner.dirs
    }

    /// Makes `cmd`'s process join the daemon cgroup between fork and exec.
    pub fn apply(&self, cmd: &mut tokio::process::Command) {
        let inner = Arc::clone(&self.inner);
        // SAFETY: the closure runs in the forked child before exec and only makes system calls
        // (setns, open, write, close) on data prepared before the fork: no allocation, no locks.
        unsafe {
            cmd.pre_exec(move || inner.join_from_child());
        }
    }
}

impl Inner {
    fn join_from_child(&self) -> std::io::Result<()> {
        if let Some(ns) = &self.host_ns {
            // SAFETY: a valid namespace fd; affects only this single-threaded child.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWCGROUP) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        for path in &self.procs {
            // SAFETY: a NUL-terminated path; the fd is closed below.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // "0" moves the writing process itself.
            // SAFETY: writes one byte from a static buffer to the fd opened above.
            let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            let err = std::io::Error::last_os_error();
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            if n != 1 {
                return Err(err);
            }
        }
        Ok(())
    }
}

/// Opens the namespace file at `path` unless it is the namespace this process is already in.
fn open_foreign_namespace(path: &Path) -> Result<Option<OwnedFd>, CgroupError> {
    let own_path = Path::new("/proc/self/ns/cgroup");
    let own = std::fs::metadata(own_path).map_err(io_err("cannot stat", own_path))?;
    let file =
        std::fs::File::open(path).map_err(io_err("cannot open the host cgroup namespace", path))?;
    let meta = file
        .metadata()
        .map_err(io_err("cannot stat the host cgroup namespace", path))?;
    if meta.ino() == own.ino() && meta.dev() == own.dev() {
        return Ok(None);
    }
    Ok(Some(OwnedFd::from(file)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 / /host/sys\\040fs/cgroup rw shared:5 - cgroup2 cgroup2 rw
60 23 0:41 / /proc rw - proc proc rw
";

    #[test]
    fn finds_every_cgroup_hierarchy_under_a_folder() {
        assert_eq!(
            hierarchies_under(MOUNTINFO, Path::new("/sys/fs/cgroup")),
            vec![
                PathBuf::from("/sys/fs/cgroup/cpu"),
                PathBuf::from("/sys/fs/cgroup/unified")
            ]
        );
        assert_eq!(
            hierarchies_under(MOUNTINFO, Path::new("/host/sys fs/cgroup")),
            vec![PathBuf::from("/host/sys fs/cgroup")]
        );
        assert!(hierarchies_under(MOUNTINFO, Path::new("/nothing")).is_empty());
        assert!(hierarchies_under("garbage\n\n- -", Path::new("/")).is_empty());
    }
}
