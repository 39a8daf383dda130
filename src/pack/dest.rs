//! Where a pack writes: a local folder or a store URL, written so a reader never sees a
//! dataset that reads wrong.
//!
//! The rules, the same for both kinds:
//! - Before writing, DEST must hold nothing but what an earlier, interrupted pack left: shard
//!   files and our temporary files. A DEST with an `index.json` already holds a finished
//!   dataset and is refused; any other file is refused too (a pack never deletes what it did
//!   not write).
//! - Each shard is written whole under its final name (a local file goes to a temporary name,
//!   is synced, then renamed; a store PUT or completed multipart upload is atomic).
//! - At the end, shards an earlier run left that the new index does not name are deleted,
//!   and `index.json` is written last. So an interrupted pack leaves no index (nothing reads
//!   it as a dataset), a re-run starts clean over the leftovers, and a finished DEST holds only
//!   the shards and `index.json`. An error stops before the index is written.

use super::error::{PackError, Result};
use crate::store::put::{DestStore, PutStore};
use bytes::Bytes;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Prefix of the temporary files a local pack writes before renaming.
const TMP_PREFIX: &str = ".shardfs-pack-tmp.";

/// Whether `name` is a shard file an MDS pack writes (`shard.NNNNN.mds[.ext]`).
pub fn is_shard_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("shard.") else {
        return false;
    };
    let (num, tail) = rest.split_at(rest.find('.').unwrap_or(rest.len()));
    num.len() >= 5
        && num.bytes().all(|b| b.is_ascii_digit())
        && (tail == ".mds"
            || tail
                .strip_prefix(".mds.")
                .is_some_and(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_alphanumeric())))
}

/// A pack's destination folder.
#[derive(Debug, Clone)]
pub enum Dest {
    /// A local folder.
    Local(PathBuf),
    /// A folder in an object store.
    Store(std::sync::Arc<DestStore>),
}

impl Dest {
    /// The destination as a user named it, for messages.
    pub fn display(&self) -> String {
        match self {
            Dest::Local(p) => p.display().to_string(),
            Dest::Store(s) => s.url(""),
        }
    }

    /// The sub-folder `name` of this destination (a `--part`'s folder).
    pub fn child(&self, name: &str) -> Dest {
        match self {
            Dest::Local(p) => Dest::Local(p.join(name)),
            Dest::Store(s) => Dest::Store(std::sync::Arc::new(s.child(name))),
        }
    }

    /// The names directly in this folder (files and sub-folders), without a leading path.
    pub fn list(&self) -> Result<Vec<String>> {
        match self {
            Dest::Local(p) => {
                let mut out = Vec::new();
                let rd = match std::fs::read_dir(p) {
                    Ok(rd) => rd,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
                    Err(e) => return Err(PackError::io(p.display(), e)),
                };
                for entry in rd {
                    let entry = entry.map_err(|e| PackError::io(p.display(), e))?;
                    out.push(entry.file_name().to_string_lossy().into_owned());
                }
                out.sort();
                Ok(out)
            }
            Dest::Store(s) => Ok(s.list_names()?),
        }
    }

    /// Checks that a pack may write here (see the module note) and creates the folder.
    pub fn prepare(&self) -> Result<()> {
        for name in self.list()? {
            if name == crate::mds::INDEX_FILE {
                return Err(PackError::Dest(format!(
                    "{} already holds a dataset (index.json); delete it or pack into another \
                     folder",
                    self.display()
                )));
            }
            if !is_shard_name(&name) && !name.starts_with(TMP_PREFIX) {
                return Err(PackError::Dest(format!(
                    "{} holds {name:?}, which no pack wrote; pack into an empty folder",
                    self.display()
                )));
            }
        }
        if let Dest::Local(p) = self {
            std::fs::create_dir_all(p).map_err(|e| PackError::io(p.display(), e))?;
        }
        Ok(())
    }

    /// Writes one file whole under `name` (atomically: see the module note).
    pub fn put(&self, name: &str, data: &[u8]) -> Result<()> {
        match self {
            Dest::Local(p) => write_local(p, name, data),
            Dest::Store(s) => Ok(s.put(name, data)?),
        }
    }

    /// [`Dest::put`] of bytes a store upload keeps (and sends) without copying them.
    pub fn put_bytes(&self, name: &str, data: Bytes) -> Result<()> {
        match self {
            Dest::Local(p) => write_local(p, name, &data),
            Dest::Store(s) => Ok(s.put_bytes(name, data)?),
        }
    }

    /// Removes what an earlier run left that `keep` does not name, then writes `index.json`.
    pub fn finish(&self, index_json: &[u8], keep: &BTreeSet<String>) -> Result<()> {
        for name in self.list()? {
            if (is_shard_name(&name) || name.starts_with(TMP_PREFIX)) && !keep.contains(&name) {
                self.remove(&name)?;
            }
        }
        self.put(crate::mds::INDEX_FILE, index_json)?;
        if let Dest::Local(p) = self {
            // The renames (and so the index) are durable once the folder is synced.
            if let Ok(dir) = std::fs::File::open(p) {
                let _ = dir.sync_all();
            }
        }
        Ok(())
    }

    /// Reads a whole file of this folder.
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        match self {
            Dest::Local(p) => {
                let path = p.join(name);
                std::fs::read(&path).map_err(|e| PackError::io(path.display(), e))
            }
            Dest::Store(s) => Ok(s.get(name)?),
        }
    }

    /// Deletes one file.
    pub fn remove(&self, name: &str) -> Result<()> {
        match self {
            Dest::Local(p) => {
                let path = p.join(name);
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        Err(PackError::io(path.display(), e))
                    }
                    _ => Ok(()),
                }
            }
            Dest::Store(s) => Ok(s.delete(name)?),
        }
    }
}

/// Writes `data` to `dir/name` through a synced temporary file renamed into place.
fn write_local(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{TMP_PREFIX}{name}"));
    let path = dir.join(name);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        PackError::io(path.display(), e)
    })
}
