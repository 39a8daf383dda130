//! Loading a dataset for the one-shot commands (`inspect`, `cat`): `index.json` and single
//! shards from a local folder or a `file://` URL. This is the one place that touches the
//! source, so object stores can replace it without changing the commands.

use crate::mds::{self, Index, INDEX_FILE};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// A dataset whose `index.json` has been read and validated.
#[derive(Debug)]
pub struct Dataset {
    root: PathBuf,
    /// The parsed index.
    pub index: Index,
}

/// Resolves SOURCE (a plain path or `file:///abs/path`) to a local folder.
fn local_root(source: &str) -> Result<PathBuf> {
    if let Some(rest) = source.strip_prefix("file://") {
        if !rest.starts_with('/') {
            bail!("file:// URLs need an absolute path (file:///path/to/dataset), got {source:?}");
        }
        return Ok(PathBuf::from(rest));
    }
    if let Some((scheme, _)) = source.split_once("://") {
        bail!("{scheme}:// sources are not supported by this build yet; use a local path or file:// URL");
    }
    Ok(PathBuf::from(source))
}

impl Dataset {
    /// Opens SOURCE and parses its `index.json`.
    pub fn open(source: &str) -> Result<Dataset> {
        let root = local_root(source)?;
        let path = root.join(INDEX_FILE);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let index = Index::parse(&bytes).with_context(|| format!("in {}", root.display()))?;
        Ok(Dataset { root, index })
    }

    /// Path of a file named by a (validated) basename.
    fn path_of(&self, basename: &str) -> PathBuf {
        self.root.join(Path::new(basename))
    }

    /// The raw (uncompressed) bytes of shard `shard`: reads the stored file, checks its size
    /// and listed hashes, decompresses when compressed and checks the raw hashes too.
    pub fn raw_shard(&self, shard: usize) -> Result<Vec<u8>> {
        let entry = self
            .index
            .shards()
            .get(shard)
            .with_context(|| format!("no shard {shard}"))?;
        let stored = entry.stored_file();
        let path = self.path_of(&stored.basename);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        mds::verify_hashes(stored, &bytes)?;
        let raw = match &entry.compression {
            Some(c) => {
                let raw = mds::decompress(c, &bytes, Some(entry.raw.bytes))
                    .map_err(|e| e.in_file(&stored.basename))?;
                mds::verify_hashes(&entry.raw, &raw)?;
                raw
            }
            None => bytes,
        };
        Ok(raw)
    }
}
