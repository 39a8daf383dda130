//! ImageFolder input: `INPUT/<class>/…/<image>`, as torchvision's `ImageFolder` reads it.
//!
//! Classes are the sub-folders of INPUT in sorted name order, numbered from 0; each class's
//! images are found in its whole tree and ordered as torchvision's `make_dataset` orders them
//! (folder by folder in sorted order, files sorted within a folder), classes one after the
//! other. A class without images is an error, as in torchvision. Image files are those with
//! torchvision's extensions (`.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp`, any case).
//!
//! Columns: `image` (the file's bytes as stored: `jpeg` when every image is a JPEG file, `png`
//! when every one is a PNG, otherwise give `--columns image:bytes,…`), `label` (`int`, the class
//! number) and `path` (`str`, the path below INPUT). `--columns` may keep a subset. A JPEG or
//! PNG column checks each file's signature, so a file that is not the image it claims to be
//! stops the pack with its name. `--part K/N` packs images `[K·n/N, (K+1)·n/N)` of the n.
//!
//! In a store, the tree is the keys under INPUT's prefix: a class is the first `/`-separated
//! part of a key, and images are ordered the same way (by folder path, then by name).

use super::columns::{check_stored, encode, Field};
use super::error::{InputError, PackError, Result};
use super::pyvalue::PyValue;
use super::remote::{ObjectQueue, RemoteTree};
use super::source::{Input, SampleSource};
use crate::mds::Encoding;
use std::path::Path;
use std::sync::Arc;

/// torchvision's `IMG_EXTENSIONS`.
const IMAGE_EXTENSIONS: [&str; 9] = [
    "jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp",
];

/// One image: its path below INPUT and its class number.
#[derive(Debug, Clone)]
pub struct Image {
    /// Path relative to INPUT, with `/` separators.
    pub rel: String,
    /// Class number.
    pub label: i64,
    /// File size in bytes (for progress).
    pub size: u64,
}

fn extension(name: &str) -> Option<String> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    IMAGE_EXTENSIONS.contains(&ext.as_str()).then_some(ext)
}

fn sorted_entries(dir: &Path) -> Result<Vec<(String, bool, u64)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| PackError::io(dir.display(), e))? {
        let entry = entry.map_err(|e| PackError::io(dir.display(), e))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            return Err(PackError::input(
                path.display().to_string(),
                InputError::NameNotUtf8,
            ));
        };
        // Follow links, as os.walk(followlinks=True) does.
        let meta = std::fs::metadata(&path).map_err(|e| PackError::io(path.display(), e))?;
        out.push((name, meta.is_dir(), meta.len()));
    }
    out.sort();
    Ok(out)
}

/// Lists every image of the ImageFolder tree at `root`, in pack order.
pub fn list(root: &Path) -> Result<Vec<Image>> {
    let mut images = Vec::new();
    let classes: Vec<String> = sorted_entries(root)?
        .into_iter()
        .filter(|(_, d, _)| *d)
        .map(|(n, _, _)| n)
        .collect();
    if classes.is_empty() {
        return Err(PackError::Options(format!(
            "{}: no class folder (ImageFolder input is INPUT/<class>/<image>)",
            root.display()
        )));
    }
    for (label, class) in classes.iter().enumerate() {
        let before = images.len();
        // os.walk visits folders top-down; sorting its (root, files) tuples orders folders
        // by path, which a depth-first walk over sorted names followed by a sort gives.
        let mut folders = vec![class.clone()];
        let mut k = 0;
        while k < folders.len() {
            let rel = folders[k].clone();
            for (name, is_dir, _) in sorted_entries(&root.join(&rel))? {
                if is_dir {
                    folders.push(format!("{rel}/{name}"));
                }
            }
            k += 1;
        }
        folders.sort();
        for rel in folders {
            for (name, is_dir, size) in sorted_entries(&root.join(&rel))? {
                if !is_dir && extension(&name).is_some() {
                    images.push(Image {
                        rel: format!("{rel}/{name}"),
                        label: label as i64,
                        size,
                    });
                }
            }
        }
        if images.len() == before {
            return Err(PackError::input(
                root.join(class).display().to_string(),
                InputError::EmptyClass,
            ));
        }
    }
    Ok(images)
}

/// Lists every image of the ImageFolder tree in a store, in pack order (see the module note).
pub fn list_remote(tree: &RemoteTree) -> Result<Vec<Image>> {
    // (class, folder below INPUT, file name, size); keys at the top are not in a class.
    let mut found: Vec<(&str, &str, &str, u64)> = Vec::new();
    for (key, size) in tree.objects() {
        let Some((class, _)) = key.split_once('/') else {
            continue;
        };
        let Some((folder, name)) = key.rsplit_once('/') else {
            continue;
        };
        if extension(name).is_some() {
            found.push((class, folder, name, *size));
        }
    }
    let mut classes: Vec<&str> = tree
        .objects()
        .iter()
        .filter_map(|(k, _)| k.split_once('/').map(|(c, _)| c))
        .collect();
    classes.sort_unstable();
    classes.dedup();
    if classes.is_empty() {
        return Err(PackError::Options(format!(
            "{}: no class folder (ImageFolder input is INPUT/<class>/<image>)",
            tree.url("")
        )));
    }
    found.sort();
    let mut images = Vec::with_capacity(found.len());
    for (label, class) in classes.iter().enumerate() {
        let before = images.len();
        images.extend(
            found
                .iter()
                .filter(|(c, ..)| c == class)
                .map(|(_, folder, name, size)| Image {
                    rel: format!("{folder}/{name}"),
                    label: label as i64,
                    size: *size,
                }),
        );
        if images.len() == before {
            return Err(PackError::input(tree.url(class), InputError::EmptyClass));
        }
    }
    Ok(images)
}

/// The inferred columns: `image` by the files' extensions, `label`, `path`.
pub fn infer_columns(images: &[Image]) -> Result<Vec<(String, Encoding)>> {
    let kind = |i: &Image| match extension(&i.rel).as_deref() {
        Some("jpg" | "jpeg") => "jpeg",
        Some("png") => "png",
        _ => "other",
    };
    let first = images.first().map(kind).unwrap_or("jpeg");
    let image = match images.iter().find(|i| kind(i) != first) {
        None if first == "jpeg" => Encoding::Jpeg { quality: None },
        None if first == "png" => Encoding::Png,
        _ => {
            return Err(PackError::Options(
                "the images are not all JPEG or all PNG files; store them as they are with \
                 --columns image:bytes,label:int,path:str"
                    .into(),
            ))
        }
    };
    Ok(vec![
        ("image".into(), image),
        ("label".into(), Encoding::Int),
        ("path".into(), Encoding::Str),
    ])
}

/// Checks the columns `--columns` asks of an ImageFolder.
pub fn check_columns(columns: &[(String, Encoding)]) -> Result<()> {
    for (name, _) in columns {
        if !["image", "label", "path"].contains(&name.as_str()) {
            return Err(PackError::Options(format!(
                "--columns: an ImageFolder has the columns image, label and path, not {name:?}"
            )));
        }
    }
    Ok(())
}

/// Reads images `[start, end)` of the list and encodes them.
pub struct ImageFolderSource {
    root: Input,
    /// For a tree in a store, the images `[start, end)` being downloaded ahead.
    queue: Option<ObjectQueue>,
    images: Vec<Image>,
    next: usize,
    end: usize,
    columns: Vec<(String, Encoding)>,
    consumed: u64,
}

impl ImageFolderSource {
    /// A source over `images[range]`, encoding `columns` (sorted as the shard stores them).
    pub fn new(
        root: Input,
        images: Vec<Image>,
        range: (usize, usize),
        columns: Vec<(String, Encoding)>,
    ) -> Result<ImageFolderSource> {
        let queue = match &root {
            Input::Remote(tree) if columns.iter().any(|(n, _)| n == "image") => {
                let keys = images[range.0..range.1]
                    .iter()
                    .map(|i| i.rel.clone())
                    .collect();
                Some(ObjectQueue::new(Arc::clone(tree), keys)?)
            }
            _ => None,
        };
        Ok(ImageFolderSource {
            root,
            queue,
            images,
            next: range.0,
            end: range.1,
            columns,
            consumed: 0,
        })
    }

    /// The bytes of the next image (local: read now; in a store: from the queue).
    fn read_image(&mut self, rel: &str) -> Result<Vec<u8>> {
        match (&self.root, self.queue.as_mut()) {
            (Input::Remote(tree), Some(q)) => match q.next_object() {
                Some(Ok(b)) => Ok(b.to_vec()),
                Some(Err(e)) => Err(PackError::io(tree.url(rel), e)),
                None => Err(PackError::io(
                    tree.url(rel),
                    std::io::Error::other("the download queue ended early"),
                )),
            },
            (Input::Local(root), _) => {
                let path = root.join(rel);
                std::fs::read(&path).map_err(|e| PackError::io(path.display(), e))
            }
            (Input::Remote(tree), None) => Err(PackError::io(
                tree.url(rel),
                std::io::Error::other("no download queue"),
            )),
        }
    }

    /// An image's path (or URL), for messages.
    fn name_of(&self, rel: &str) -> String {
        match &self.root {
            Input::Local(root) => root.join(rel).display().to_string(),
            Input::Remote(tree) => tree.url(rel),
        }
    }
}

impl SampleSource for ImageFolderSource {
    fn next_sample(&mut self, out: &mut [Vec<u8>]) -> Result<bool> {
        if self.next >= self.end {
            return Ok(false);
        }
        let image = self.images[self.next].clone();
        self.next += 1;
        let path = self.name_of(&image.rel);
        let columns = self.columns.clone();
        for ((name, enc), out) in columns.into_iter().zip(out.iter_mut()) {
            let field = match name.as_str() {
                "image" => {
                    let bytes = self.read_image(&image.rel)?;
                    check_stored(&enc, &bytes)
                        .map_err(|e| PackError::input(path.clone(), InputError::Value(e)))?;
                    self.consumed += bytes.len() as u64;
                    Field::Raw(bytes)
                }
                "label" => Field::Py(PyValue::Int(image.label.to_string())),
                _ => Field::Py(PyValue::Str(image.rel.clone())),
            };
            encode(&enc, &field, out).map_err(|error| {
                PackError::input(
                    path.clone(),
                    InputError::Column {
                        column: name,
                        error,
                    },
                )
            })?;
        }
        Ok(true)
    }

    fn consumed(&self) -> u64 {
        self.consumed
    }
}
