//! What the plugin has mounted, one JSON record per path in `--state-dir`, so a restarted
//! plugin re-adopts the volumes it published before (their FUSE daemons keep running) and can
//! still unpublish them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How a path was mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountKind {
    /// A `shardfs mount` daemon serves the path (a staged volume, or an inline volume).
    Daemon,
    /// A read-only bind mount of the staged volume at `from`.
    Bind {
        /// The staging path.
        from: PathBuf,
    },
}

/// One mounted path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The CSI volume id.
    pub volume_id: String,
    /// The staging or target path.
    pub path: PathBuf,
    /// Daemon or bind mount.
    pub kind: MountKind,
    /// Digest of the request that made it (attributes, flags, secret), to detect a different
    /// request at the same path.
    pub digest: String,
    /// An inline (ephemeral) volume: its cache goes with its unpublish.
    #[serde(default)]
    pub inline: bool,
    /// A daemon's cache folder and its limit in bytes (counted in the node's cache budget).
    #[serde(default)]
    pub cache: Option<(PathBuf, u64)>,
}

/// The records on disk.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Opens (creating, mode 0700) the folder of records.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    fn file(&self, path: &Path) -> PathBuf {
        use sha2::{Digest, Sha256};
        let key = hex::encode(&Sha256::digest(path.as_os_str().as_encoded_bytes())[..16]);
        self.dir.join(format!("{key}.json"))
    }

    /// The record for `path`, if any (an unreadable record is logged and treated as absent).
    pub fn get(&self, path: &Path) -> Option<Record> {
        let file = self.file(path);
        let bytes = std::fs::read(&file).ok()?;
        match serde_json::from_slice::<Record>(&bytes) {
            Ok(r) if r.path == path => Some(r),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "ignoring an unreadable state record");
                None
            }
        }
    }

    /// Writes `record` atomically.
    pub fn put(&self, record: &Record) -> std::io::Result<()> {
        let file = self.file(&record.path);
        let tmp = file.with_extension("tmp");
        let bytes = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &file)
    }

    /// Removes the record for `path` (absent is fine).
    pub fn remove(&self, path: &Path) -> std::io::Result<()> {
        match std::fs::remove_file(self.file(path)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every record, for re-adoption at start.
    pub fn all(&self) -> Vec<Record> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .collect()
    }
}
