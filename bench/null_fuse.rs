//! The FUSE ceiling of this machine: a read-only filesystem that serves the names and sizes of a
//! manifest (`relative/path<TAB>size` per line, as the bench lists a shardfs epoch folder) from
//! memory, with the kernel options shardfs uses (src/fuse: read-only, noatime, clone_fd, the
//! same init flags with READDIRPLUS always on, 1-year TTLs, NO_OPEN, `--threads` workers).
//! Reads return a fixed byte pattern: no disk, no cache, no lookups beyond a hash map. The bench reads it like shardfs's
//! warm pass; shardfs's rate over this one is its share of the ceiling.
//!
//! A line may carry a third column, a key: lines with the same key name one inode (as shardfs
//! gives a sample one inode in every epoch folder), so the kernel's page cache serves that file
//! again under its other names; the bench's page-cache pass reads it that way.
//!
//! `bench-null-fuse --manifest FILE --threads N MOUNTPOINT` (runs in the foreground).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEntry, ReplyOpen, Request,
};

const TTL: Duration = Duration::from_secs(365 * 24 * 3600);
const PATTERN_PERIOD: usize = 1 << 20;

struct Node {
    attr: FileAttr,
    children: Vec<(String, u64)>,
}

struct NullFs {
    nodes: Vec<Node>,
    names: HashMap<(u64, String), u64>,
    /// The inode of each manifest key (third column) met so far.
    keyed: HashMap<String, u64>,
    pattern: Vec<u8>,
}

fn attr(ino: u64, size: u64, dir: bool) -> FileAttr {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: if dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if dir { 0o555 } else { 0o444 },
        nlink: if dir { 2 } else { 1 },
        uid,
        gid,
        rdev: 0,
        flags: 0,
        blksize: 1 << 20,
    }
}

impl NullFs {
    fn new(manifest: &str) -> Result<NullFs, String> {
        let mut fs = NullFs {
            nodes: vec![
                // Inode 0 is unused; 1 is the root.
                Node {
                    attr: attr(0, 0, true),
                    children: Vec::new(),
                },
                Node {
                    attr: attr(1, 0, true),
                    children: Vec::new(),
                },
            ],
            names: HashMap::new(),
            keyed: HashMap::new(),
            pattern: (0..2 * PATTERN_PERIOD).map(|i| (i % 251) as u8).collect(),
        };
        for (n, line) in manifest.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (path, rest) = line
                .split_once('\t')
                .ok_or_else(|| format!("manifest line {}: no tab", n + 1))?;
            let (size, alias) = match rest.split_once('\t') {
                Some((size, alias)) => (size, Some(alias.trim().to_string())),
                None => (rest, None),
            };
            let size: u64 = size
                .trim()
                .parse()
                .map_err(|e| format!("manifest line {}: size: {e}", n + 1))?;
            let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
            let mut parent = 1u64;
            for (k, part) in parts.iter().enumerate() {
                let last = k + 1 == parts.len();
                let key = (parent, part.to_string());
                let shared = match (&alias, last) {
                    (Some(a), true) => fs.keyed.get(a).copied(),
                    _ => None,
                };
                parent = match (fs.names.get(&key), shared) {
                    (Some(&ino), _) => ino,
                    (None, Some(ino)) => {
                        if fs.nodes[ino as usize].attr.size != size {
                            return Err(format!(
                                "manifest line {}: size differs from the other names of its key",
                                n + 1
                            ));
                        }
                        fs.nodes[parent as usize]
                            .children
                            .push((part.to_string(), ino));
                        fs.names.insert(key, ino);
                        ino
                    }
                    (None, None) => {
                        let ino = fs.nodes.len() as u64;
                        fs.nodes.push(Node {
                            attr: attr(ino, if last { size } else { 0 }, !last),
                            children: Vec::new(),
                        });
                        fs.nodes[parent as usize]
                            .children
                            .push((part.to_string(), ino));
                        fs.names.insert(key, ino);
                        if let (Some(a), true) = (&alias, last) {
                            fs.keyed.insert(a.clone(), ino);
                        }
                        ino
                    }
                };
            }
        }
        Ok(fs)
    }

    fn node(&self, ino: INodeNo) -> Option<&Node> {
        self.nodes.get(ino.0 as usize).filter(|_| ino.0 >= 1)
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_NO_OPEN_SUPPORT
            | InitFlags::FUSE_NO_OPENDIR_SUPPORT
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_ASYNC_READ
            | InitFlags::FUSE_MAX_PAGES;
        let supported = config.capabilities() & wanted;
        let _ = config.add_capabilities(supported);
        let _ = config
            .set_max_readahead(u32::MAX)
            .or_else(|max| config.set_max_readahead(max));
        let _ = config
            .set_max_background(256)
            .or_else(|max| config.set_max_background(max));
        let _ = config.set_congestion_threshold(192);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let key = (parent.0, name.to_string_lossy().into_owned());
        match self
            .names
            .get(&key)
            .and_then(|&i| self.nodes.get(i as usize))
        {
            Some(n) => reply.entry(&TTL, &n.attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.node(ino) {
            Some(n) => reply.attr(&TTL, &n.attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
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
        let Some(n) = self.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let len = n.attr.size.saturating_sub(offset).min(u64::from(size)) as usize;
        let start = (offset % PATTERN_PERIOD as u64) as usize;
        let len = len.min(self.pattern.len() - start);
        reply.data(&self.pattern[start..start + len]);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(n) = self.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        for (k, (name, child)) in n.children.iter().enumerate().skip(offset as usize) {
            let kind = self.nodes[*child as usize].attr.kind;
            if reply.add(INodeNo(*child), k as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(n) = self.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        for (k, (name, child)) in n.children.iter().enumerate().skip(offset as usize) {
            let a = &self.nodes[*child as usize].attr;
            if reply.add(INodeNo(*child), k as u64 + 1, name, &TTL, a, Generation(0)) {
                break;
            }
        }
        reply.ok()
    }
}

fn main() {
    let mut manifest = None;
    let mut threads = 2usize;
    let mut mountpoint = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--manifest" => manifest = args.next().map(PathBuf::from),
            "--threads" => threads = args.next().and_then(|t| t.parse().ok()).unwrap_or(2),
            _ => mountpoint = Some(PathBuf::from(a)),
        }
    }
    let (Some(manifest), Some(mountpoint)) = (manifest, mountpoint) else {
        eprintln!("usage: bench-null-fuse --manifest FILE [--threads N] MOUNTPOINT");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&manifest) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("bench-null-fuse: {}: {e}", manifest.display());
            std::process::exit(1);
        }
    };
    let fs = match NullFs::new(&text) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("bench-null-fuse: {e}");
            std::process::exit(1);
        }
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoAtime,
        MountOption::FSName("null".into()),
        MountOption::Subtype("bench-null".into()),
    ];
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    let session = match fuser::Session::new(fs, &mountpoint, &config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench-null-fuse: mount {}: {e}", mountpoint.display());
            std::process::exit(1);
        }
    };
    if let Err(e) = session.run() {
        eprintln!("bench-null-fuse: {e}");
        std::process::exit(1);
    }
}
