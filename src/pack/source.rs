//! What every input format gives the packer: samples, one at a time, already encoded into
//! the shard's columns; and the choice of format from `--format` or from what INPUT holds.

use super::error::{OptionError, PackError, Result};
use super::remote::{RemoteFile, RemoteTree};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One input file (local, or an object of a store) and its size.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// Its path (an object's URL), for messages.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The object, for an input in a store; None for a local file.
    pub remote: Option<RemoteFile>,
}

impl InputFile {
    /// A local file.
    pub fn local(path: PathBuf, size: u64) -> InputFile {
        InputFile {
            path,
            size,
            remote: None,
        }
    }

    /// A reader of the file from byte `offset` on (an object is streamed by ranged GETs).
    pub fn open_at(&self, offset: u64) -> Result<Box<dyn Read + Send>> {
        if let Some(r) = &self.remote {
            return Ok(r.open_at(offset, self.size));
        }
        let io = |e| PackError::io(self.path.display(), e);
        let mut f = std::fs::File::open(&self.path).map_err(io)?;
        if offset > 0 {
            f.seek(SeekFrom::Start(offset)).map_err(io)?;
        }
        Ok(Box::new(f))
    }
}

/// Where the input is: a local file or folder, or a folder (or object) in a store.
#[derive(Debug, Clone)]
pub enum Input {
    /// A local path.
    Local(PathBuf),
    /// Objects in a store.
    Remote(Arc<RemoteTree>),
}

impl Input {
    /// The input as a user named it, for messages.
    pub fn display(&self) -> String {
        match self {
            Input::Local(p) => p.display().to_string(),
            Input::Remote(t) => t.url(""),
        }
    }

    /// The files (objects) whose names `keep` accepts: the one file INPUT names, or those
    /// directly in its folder, sorted by name.
    pub fn files(&self, keep: impl Fn(&str) -> bool) -> Result<Vec<InputFile>> {
        match self {
            Input::Local(p) => list_files(p, keep),
            Input::Remote(t) => t.files(keep),
        }
    }

    /// The format when `--format` is not given (see [`detect`]).
    pub fn detect(&self) -> Result<Format> {
        match self {
            Input::Local(p) => detect(p),
            Input::Remote(t) => format_of_folder(
                &self.display(),
                t.objects().iter().map(|(k, _)| match k.split_once('/') {
                    Some((dir, _)) => (dir.to_string(), true),
                    None => (k.clone(), false),
                }),
            ),
        }
    }
}

/// A reader of one input format.
pub trait SampleSource: Send {
    /// Encodes the next sample into `out` (one buffer per column, in the shard's sorted column
    /// order, empty on entry). Returns false at the end of the input (or of this part).
    fn next_sample(&mut self, out: &mut [Vec<u8>]) -> Result<bool>;
    /// Input bytes read so far, for progress.
    fn consumed(&self) -> u64;
}

/// The input formats `pack` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A folder per class of image files (torchvision's ImageFolder).
    Imagefolder,
    /// JSON Lines: one JSON object per line.
    Jsonl,
    /// Parquet files.
    Parquet,
    /// WebDataset tar shards.
    Webdataset,
}

impl Format {
    /// Every format, with the name `--format` takes.
    pub const ALL: [(Format, &'static str); 4] = [
        (Format::Imagefolder, "imagefolder"),
        (Format::Jsonl, "jsonl"),
        (Format::Parquet, "parquet"),
        (Format::Webdataset, "webdataset"),
    ];

    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        Format::ALL
            .iter()
            .find(|(f, _)| *f == self)
            .map_or("?", |(_, n)| n)
    }
}

impl std::str::FromStr for Format {
    type Err = OptionError;
    fn from_str(s: &str) -> std::result::Result<Format, OptionError> {
        Format::ALL
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(f, _)| *f)
            .ok_or_else(|| OptionError::Format(s.to_string()))
    }
}

/// The files of a folder (or the one file) whose names `keep` accepts, sorted by name.
pub fn list_files(input: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<InputFile>> {
    let meta = std::fs::metadata(input).map_err(|e| PackError::io(input.display(), e))?;
    if meta.is_file() {
        return Ok(vec![InputFile::local(input.to_path_buf(), meta.len())]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(input).map_err(|e| PackError::io(input.display(), e))? {
        let entry = entry.map_err(|e| PackError::io(input.display(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let meta = std::fs::metadata(&path).map_err(|e| PackError::io(path.display(), e))?;
        if meta.is_file() && keep(&name) {
            files.push(InputFile::local(path, meta.len()));
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    if files.is_empty() {
        return Err(PackError::Options(format!(
            "{}: no input file of this format",
            input.display()
        )));
    }
    Ok(files)
}

/// Whether a file name is a JSON Lines file's (`.jsonl`, `.ndjson`, `.json`): the files a
/// JSON Lines folder INPUT contributes.
pub fn is_jsonl_name(name: &str) -> bool {
    [".jsonl", ".ndjson", ".json"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// The format a file name's extension says, if any.
fn format_of_name(name: &str) -> Option<Format> {
    if is_jsonl_name(name) {
        Some(Format::Jsonl)
    } else if name.ends_with(".parquet") {
        Some(Format::Parquet)
    } else if name.ends_with(".tar") {
        Some(Format::Webdataset)
    } else {
        None
    }
}

/// The format of a local INPUT when `--format` is not given: by a file's extension, or by
/// what a folder holds (`.jsonl`/`.parquet`/`.tar` files, else sub-folders of images).
pub fn detect(input: &Path) -> Result<Format> {
    let by_name = format_of_name;
    let meta = std::fs::metadata(input).map_err(|e| PackError::io(input.display(), e))?;
    if meta.is_file() {
        let name = input.to_string_lossy();
        return by_name(&name).ok_or_else(|| {
            PackError::Options(format!(
                "{}: cannot tell the format from the name; give --format",
                input.display()
            ))
        });
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(input).map_err(|e| PackError::io(input.display(), e))? {
        let entry = entry.map_err(|e| PackError::io(input.display(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        entries.push((name, entry.path().is_dir()));
    }
    format_of_folder(&input.display().to_string(), entries.into_iter())
}

/// The format of a folder's entries, `(name, is a folder)`: by its files' extensions, else
/// an ImageFolder when it has sub-folders.
fn format_of_folder(
    display: &str,
    entries: impl Iterator<Item = (String, bool)>,
) -> Result<Format> {
    let mut found = None;
    let mut has_dirs = false;
    for (name, is_dir) in entries {
        if is_dir {
            has_dirs = true;
        } else if let Some(f) = format_of_name(&name) {
            if found.is_some_and(|g| g != f) {
                return Err(PackError::Options(format!(
                    "{display}: holds files of several formats; give --format"
                )));
            }
            found = Some(f);
        }
    }
    match (found, has_dirs) {
        (Some(f), _) => Ok(f),
        (None, true) => Ok(Format::Imagefolder),
        (None, false) => Err(PackError::Options(format!(
            "{display}: cannot tell the format (no .jsonl, .parquet or .tar file, no class \
             folder); give --format"
        ))),
    }
}
