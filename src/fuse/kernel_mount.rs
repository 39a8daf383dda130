//! The mount(2) call itself, made here rather than by `fuser` when we may: `fuser` mounts as
//! type `fuse` whatever subtype it is given (only `fusermount3` turns a subtype into
//! `fuse.SUBTYPE`), and `shardfs unmount`, `findmnt -t fuse.shardfs`, `df` and `mount -l`
//! tell our mounts from any other FUSE filesystem by that type. So a process allowed to call
//! mount(2) (root, or CAP_SYS_ADMIN) opens `/dev/fuse` and mounts it as `fuse.shardfs` with the
//! dataset's SOURCE as the device name, then hands the descriptor to `fuser`; anyone else goes
//! through `fuser` and `fusermount3`, which gives the same type from the `subtype` option.
//!
//! The options are those of the kernel's FUSE documentation
//! (Documentation/filesystems/fuse.rst, "Mount options"): `fd`, `rootmode`, `user_id`,
//! `group_id`, and `allow_other` when other users may read the mount.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The filesystem type our mounts carry in `/proc/mounts`.
pub const FS_TYPE: &str = "fuse.shardfs";

/// A mount made by [`mount`]: unmounted once, by whoever asks first.
#[derive(Clone, Debug)]
pub(super) struct KernelMount {
    /// The absolute mountpoint, or None once unmounted.
    path: Arc<Mutex<Option<CString>>>,
}

impl KernelMount {
    /// Unmounts (a no-op after the first time); the serving loop then ends.
    pub(super) fn unmount(&self) -> io::Result<()> {
        let mut guard = self
            .path
            .lock()
            .map_err(|_| io::Error::other("unmount lock poisoned"))?;
        let Some(path) = guard.as_ref() else {
            return Ok(());
        };
        // SAFETY: path is a valid NUL-terminated string.
        if unsafe { libc::umount2(path.as_ptr(), 0) } != 0 {
            let e = io::Error::last_os_error();
            // Unmounted from outside (`shardfs unmount`, `umount`): nothing left to do.
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
        }
        *guard = None;
        Ok(())
    }
}

/// Mounts a fresh `/dev/fuse` descriptor at `mountpoint` as [`FS_TYPE`], read-only, with
/// `source` as the device name. `Ok(None)` when this process may not call mount(2) (the
/// caller then lets `fusermount3` do it); any other failure is an error.
pub(super) fn mount(
    mountpoint: &Path,
    source: &str,
    allow_other: bool,
) -> io::Result<Option<(OwnedFd, KernelMount)>> {
    let abs = std::fs::canonicalize(mountpoint)?;
    let root_mode = std::fs::metadata(&abs)?.mode() & libc::S_IFMT;
    let dev = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(None),
        Err(e) => return Err(e),
    };
    let fd = OwnedFd::from(dev);
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={root_mode:o},user_id={uid},group_id={gid}",
        fd.as_raw_fd()
    );
    if allow_other {
        data.push_str(",allow_other");
    }
    let c =
        |s: &[u8]| CString::new(s).map_err(|_| io::Error::other("a NUL byte in a mount argument"));
    let target = c(abs.as_os_str().as_bytes())?;
    let source = c(source.as_bytes())?;
    let fstype = c(FS_TYPE.as_bytes())?;
    let data = c(data.as_bytes())?;
    let flags = libc::MS_RDONLY | libc::MS_NODEV | libc::MS_NOSUID | libc::MS_NOATIME;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EPERM) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some((
        fd,
        KernelMount {
            path: Arc::new(Mutex::new(Some(target))),
        },
    )))
}
