//! `fuse`: the only module that speaks FUSE. It forwards kernel requests to [`Vfs`] and sets
//! the kernel options that make a read-only, never-changing tree fast.
//!
//! Why these options (DESIGN.md §4): metadata never changes while mounted, so entries and
//! attributes get a long TTL and page-cache contents are kept across opens (`FOPEN_KEEP_CACHE`,
//! which the kernel applies by itself once `OPEN` answers `ENOSYS`, i.e. `FUSE_NO_OPEN_SUPPORT`:
//! no OPEN/RELEASE round trips per sample file). Reads are large (`max_pages` at the kernel's
//! maximum, up to 1 MiB per request), many are in flight (`max_background`), several threads
//! each with a cloned `/dev/fuse` descriptor serve them.
//!
//! Listings are always READDIRPLUS (not the kernel's "auto" mode, which falls back to plain
//! READDIR after the first page): a later epoch that the page cache holds is then opened without
//! one LOOKUP round trip per file (measured: 40,000 files of a cached epoch read in 0.9 s instead
//! of 2.1 s). Attributes go out for files whose size was computed earlier in this mount (the vfs
//! remembers the last 2^19 to 2^20 sizes; a listing never reads shards) or follows from a shard
//! header in memory (a rank folder's listing fetches those first, see `Vfs::readdir_plus`);
//! other entries get a
//! placeholder and a zero TTL, so the kernel looks them up when they are opened. The placeholder
//! differs from the real attributes in its size only: with `FUSE_AUTO_INVAL_DATA` a look-up
//! whose mtime differs from the one the kernel holds drops the inode's cached pages, and on a
//! cold epoch those are the pages handed over below (a sample's label, pushed while its image
//! was read, was dropped by the label's own look-up and read again: 2 requests per sample
//! instead of 1, measured on the bench's cold pass). A sample is one inode under every name, and
//! on Linux 6.18 a placeholder applied to an inode the kernel holds drops its cached pages (its
//! size changes); an inode the kernel holds was sized when it was looked up, so this happens
//! only once its size has left the map (after about 2^19 more files were sized).
//!
//! When the first file of a sample is read, the vfs may hand its other files to the page cache
//! (`page_push`, `FUSE_NOTIFY_STORE`), so their reads never become requests.
//!
//! `status.json` is the one file whose content changes: it has a zero TTL and a fresh mtime on every `getattr`, and
//! `FUSE_AUTO_INVAL_DATA` makes the kernel drop its cached pages when the mtime moves.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEntry, ReplyOpen, Request, SessionACL,
};

use crate::vfs::{Attr, Ino, Kind, Vfs, VfsError};

mod kernel_mount;
mod page_push;
mod waiting;
pub use kernel_mount::FS_TYPE;
use waiting::WaitingPool;

/// TTL of entries and attributes that never change.
const LONG_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// Mount settings of the FUSE session.
#[derive(Clone, Debug)]
pub struct FuseOptions {
    /// Let other users read the mount (`allow_other`).
    pub allow_other: bool,
    /// Threads serving kernel requests.
    pub threads: usize,
    /// Most threads for requests that wait for the object store (a shard's download), so
    /// that they do not hold up the `threads` serving everything else.
    pub waiting_threads: usize,
    /// Name shown as the mount's source (device) in `/proc/mounts`, `findmnt` and `df`.
    pub fs_name: String,
}

/// Errors of the FUSE layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FuseError {
    /// The kernel refused the mount or the session failed.
    #[error("FUSE session at {path}: {source}")]
    Session {
        /// The mountpoint.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A mounted, initialised session that has not started serving yet.
pub struct Mounted {
    session: fuser::Session<Adapter>,
    path: String,
    /// Set when we made the mount ourselves (as `fuse.shardfs`), not `fuser`.
    own: Option<kernel_mount::KernelMount>,
}

/// Unmounts a running session from another thread (e.g. on SIGTERM).
pub struct Unmounter(UnmountBy);

enum UnmountBy {
    Fuser(fuser::SessionUnmounter),
    Own(kernel_mount::KernelMount),
}

impl Unmounter {
    /// Unmounts; the serving loop then returns.
    pub fn unmount(&mut self) -> std::io::Result<()> {
        match &mut self.0 {
            UnmountBy::Fuser(u) => u.unmount(),
            UnmountBy::Own(m) => m.unmount(),
        }
    }
}

/// Mounts `vfs` at `mountpoint` and completes the FUSE handshake: when this returns the mount
/// answers requests as soon as [`Mounted::serve`] runs.
pub fn mount(vfs: Arc<Vfs>, mountpoint: &Path, opts: &FuseOptions) -> Result<Mounted, FuseError> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoAtime,
        MountOption::FSName(opts.fs_name.clone()),
        MountOption::Subtype("shardfs".into()),
    ];
    if opts.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    let path = mountpoint.display().to_string();
    let adapter = Adapter {
        vfs: vfs.clone(),
        waiting: WaitingPool::new(opts.waiting_threads),
    };
    let session_error = |source| FuseError::Session {
        path: path.clone(),
        source,
    };
    let (session, own) = match kernel_mount::mount(mountpoint, &opts.fs_name, opts.allow_other)
        .map_err(session_error)?
    {
        Some((fd, own)) => {
            let acl = config.acl;
            match fuser::Session::from_fd(adapter, fd, acl, config) {
                Ok(s) => (s, Some(own)),
                Err(e) => {
                    if let Err(u) = own.unmount() {
                        tracing::warn!(error = %u, "cannot unmount after a failed FUSE handshake");
                    }
                    return Err(session_error(e));
                }
            }
        }
        None => (
            fuser::Session::new(adapter, mountpoint, &config).map_err(session_error)?,
            None,
        ),
    };
    // Asked from inside a READ of the same inode: the kernel may hold that inode's page
    // locks until the read is answered, so the notification goes from a thread of its own.
    let notifier = session.notifier();
    vfs.set_forget_size(Box::new(move |ino, done| {
        let n = notifier.clone();
        let spawned = std::thread::Builder::new()
            .name("fuse-inval".into())
            .spawn(move || {
                if let Err(e) = n.inval_inode(INodeNo(ino.0), 0, -1) {
                    tracing::warn!(ino = ino.0, error = %e, "cannot tell the kernel to forget a file's size");
                }
                done();
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a thread to invalidate a file's size");
        }
    }));
    match page_push::start(session.notifier()) {
        Ok(push) => {
            vfs.set_push_pages(push.file);
            if push_landed_wanted() {
                vfs.set_push_batches(push.batch, push.held);
            } else {
                tracing::info!(
                    "SHARDFS_PUSH_LANDED=off: landed shards' files are read through FUSE"
                );
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the thread that hands files to the page cache; every file is read through FUSE")
        }
    }
    Ok(Mounted { session, path, own })
}

/// Whether the files of shards that land are handed to the page cache
/// (`SHARDFS_PUSH_LANDED=off` turns it off, to measure it or to see each read reach the
/// daemon; anything else leaves it on).
fn push_landed_wanted() -> bool {
    std::env::var("SHARDFS_PUSH_LANDED").map_or(true, |v| v.trim() != "off")
}

impl Mounted {
    /// A handle that unmounts from another thread.
    pub fn unmounter(&mut self) -> Unmounter {
        match &self.own {
            Some(m) => Unmounter(UnmountBy::Own(m.clone())),
            None => Unmounter(UnmountBy::Fuser(self.session.unmount_callable())),
        }
    }

    /// Serves requests until the filesystem is unmounted.
    pub fn serve(self) -> Result<(), FuseError> {
        let path = self.path;
        let ended = self.session.run();
        if ended.is_err() {
            // The kernel did not end the session (ENODEV after an unmount): leave no
            // dead mount behind. `fuser` does the same for the mounts it made.
            if let Some(own) = &self.own {
                if let Err(e) = own.unmount() {
                    tracing::warn!(error = %e, "cannot unmount after the FUSE session failed");
                }
            }
        }
        ended.map_err(|source| FuseError::Session { path, source })
    }
}

struct Adapter {
    vfs: Arc<Vfs>,
    /// Runs the requests that may wait for a download.
    waiting: WaitingPool,
}

impl Adapter {
    /// Runs `answer` (a request's reply; true unless it answered an error) on this FUSE
    /// thread, or on the waiting pool when answering `ino` may wait for a shard's download
    /// (`for_read`: a READ, else a size).
    fn answer(&self, ino: Ino, for_read: bool, answer: impl FnOnce(&Vfs) -> bool + Send + 'static) {
        match self.vfs.waits_for(ino, for_read) {
            Some(shard) => {
                let vfs = self.vfs.clone();
                self.waiting.run_for(shard, move || answer(&vfs));
            }
            None => {
                answer(&self.vfs);
            }
        }
    }
}

/// Answers a LOOKUP; true unless it answered an error.
fn reply_entry(r: Result<Attr, VfsError>, reply: ReplyEntry) -> bool {
    match r {
        Ok(a) => {
            reply.entry(&ttl(&a), &file_attr(&a), Generation(0));
            true
        }
        // A plain ENOENT: the kernel does not cache it, so a name that does not exist costs
        // one request per lookup (negative dentries are future work).
        Err(e) => {
            reply.error(errno(&e));
            false
        }
    }
}

/// Answers a GETATTR; true unless it answered an error.
fn reply_attr(r: Result<Attr, VfsError>, reply: ReplyAttr) -> bool {
    match r {
        Ok(a) => {
            reply.attr(&ttl(&a), &file_attr(&a));
            true
        }
        Err(e) => {
            reply.error(errno(&e));
            false
        }
    }
}

/// Answers a READ; true unless it answered an error.
fn reply_data(r: Result<bytes::Bytes, VfsError>, reply: ReplyData) -> bool {
    match r {
        Ok(data) => {
            reply.data(&data);
            true
        }
        Err(e) => {
            reply.error(errno(&e));
            false
        }
    }
}

fn errno(e: &VfsError) -> Errno {
    Errno::from_i32(e.errno())
}

/// The FUSE file type of a node of kind `kind`.
fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    let nlink = match a.kind {
        Kind::Dir => 2,
        Kind::File => 1,
    };
    // SAFETY: getuid/getgid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    FileAttr {
        ino: INodeNo(a.ino.0),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: UNIX_EPOCH,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink,
        uid,
        gid,
        rdev: 0,
        flags: 0,
        blksize: 1 << 20,
    }
}

fn ttl(a: &Attr) -> Duration {
    if a.immutable {
        LONG_TTL
    } else {
        Duration::ZERO
    }
}

impl Filesystem for Adapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_NO_OPEN_SUPPORT
            | InitFlags::FUSE_NO_OPENDIR_SUPPORT
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_ASYNC_READ
            | InitFlags::FUSE_MAX_PAGES;
        let supported = config.capabilities() & wanted;
        if let Err(unsupported) = config.add_capabilities(supported) {
            tracing::debug!(?unsupported, "kernel lacks some FUSE capabilities");
        }
        let _ = config
            .set_max_readahead(u32::MAX)
            .or_else(|max| config.set_max_readahead(max));
        let _ = config
            .set_max_background(256)
            .or_else(|max| config.set_max_background(max));
        let _ = config.set_congestion_threshold(192);
        tracing::info!(abi = ?config.kernel_abi(), "FUSE session initialised");
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        let ino = match self.vfs.resolve(Ino(parent.0), name) {
            Ok(ino) => ino,
            Err(e) => return reply.error(errno(&e)),
        };
        self.answer(ino, false, move |vfs| reply_entry(vfs.getattr(ino), reply));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = Ino(ino.0);
        self.answer(ino, false, move |vfs| reply_attr(vfs.getattr(ino), reply));
    }

    fn open(&self, _req: &Request, _ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        // Only reached when the kernel still sends OPEN: refuse writes, keep the page cache.
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        reply.error(Errno::ENOSYS)
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: fuser::ReplyEmpty,
    ) {
        // Nothing to write back; ENOSYS tells the kernel to stop sending FLUSH on close
        // (fuser's default answers the same but logs a warning each time).
        reply.error(Errno::ENOSYS)
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS)
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let ino = Ino(ino.0);
        self.answer(ino, true, move |vfs| {
            reply_data(vfs.read(ino, offset, size), reply)
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.vfs.readdir(Ino(ino.0), offset, |e| {
            reply.add(INodeNo(e.ino.0), e.next_offset, file_type(e.kind), &e.name)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let vfs = &self.vfs;
        let r = vfs.readdir_plus(Ino(ino.0), offset, |e, known| {
            // Sizes not yet known are not fetched for a listing: such entries get a zero TTL,
            // so the kernel asks again (LOOKUP, exact size) when the file is used.
            let (attr, t) = match known {
                Some(a) => (file_attr(&a), ttl(&a)),
                None => {
                    let placeholder = vfs.placeholder_attr(e.ino, e.kind);
                    (file_attr(&placeholder), Duration::ZERO)
                }
            };
            reply.add(
                INodeNo(e.ino.0),
                e.next_offset,
                &e.name,
                &t,
                &attr,
                Generation(0),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn access(
        &self,
        _req: &Request,
        _ino: INodeNo,
        mask: fuser::AccessFlags,
        reply: fuser::ReplyEmpty,
    ) {
        if mask.contains(fuser::AccessFlags::W_OK) {
            reply.error(Errno::EROFS)
        } else {
            reply.ok()
        }
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // No extended attributes; ENOSYS makes the kernel stop asking.
        reply.error(Errno::ENOSYS)
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS)
    }

    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: fuser::ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 1 << 20, 255, 1 << 20);
    }
}
