//! WebDataset input: tar files whose members are grouped into samples by key, as the
//! `webdataset` library groups them (`tariterators.py`: `base_plus_ext` and `group_by_keys`).
//!
//! A member `dir/name.ext1.ext2` has the key `dir/name` (up to the first dot of the file
//! name) and the extension `ext1.ext2` (lower-cased); consecutive members with the same key
//! form one sample; a member without a dot, and anything but a regular file, is skipped; two
//! members with the same key and extension in a row are an error. INPUT is one `.tar` or a
//! folder of them, read in sorted name order; `--part K/N` packs tar files
//! `[K·n/N, (K+1)·n/N)` of the n.
//!
//! Columns: `__key__` (`str`) and one per extension, inferred from the first
//! [`INFER_SAMPLES`] samples: `jpg`/`jpeg` → `jpeg`, `png` → `png`, `txt`/`text`/`cls`/`cls2`
//! → `str`, `json` → `json`, anything else → `bytes`. Member bytes are stored as they are
//! (as MDSWriter stores `bytes` values whatever the encoding); `str` and `json` members
//! must be UTF-8, JPEG and PNG members must carry their signature. Every sample must have
//! every column; a sample with an extension the inference did not see is an error unless
//! `--columns` lists what to keep.
//!
//! The tar reader is our own and small: POSIX ustar headers, GNU long names (`L`) and pax
//! `path` records; a tar that ends inside a member is an error naming the member.

use super::columns::{check_stored, encode, Field};
use super::error::{InputError, PackError, Result, TarFault};
use super::pyvalue::PyValue;
use super::source::{InputFile, SampleSource};
use crate::mds::render::tar::checksum;
use crate::mds::Encoding;
use std::io::{BufRead, BufReader, Read};

type Stream = BufReader<Box<dyn Read + Send>>;

/// How many samples column inference looks at.
pub const INFER_SAMPLES: usize = 1000;

/// The tar reader's buffer: headers and small members are read through it.
const BUFFER: usize = 64 << 10;
/// A member with at least this many bytes left after what the buffer holds is read straight
/// into its own bytes.
const DIRECT_READ: usize = 16 << 10;

/// Bytes reserved for a member's data before any is read, at most.
const MAX_RESERVE: usize = 64 << 20;

/// One member of a tar file.
struct Member {
    name: String,
    data: Vec<u8>,
}

/// A streaming reader of one tar file's regular members.
struct TarReader {
    r: Stream,
    path: String,
    /// Bytes read so far.
    pos: u64,
}

fn octal(field: &[u8]) -> Option<u64> {
    // GNU base-256 for large sizes: the high bit of the first byte is set.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    let text: String = field
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect();
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

impl TarReader {
    fn open(file: &InputFile) -> Result<TarReader> {
        Ok(TarReader {
            r: BufReader::with_capacity(BUFFER, file.open_at(0)?),
            path: file.path.display().to_string(),
            pos: 0,
        })
    }

    /// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean end before the first byte.
    fn fill(&mut self, buf: &mut [u8], member: Option<&str>) -> Result<bool> {
        let mut got = 0;
        while got < buf.len() {
            let n = self
                .r
                .read(&mut buf[got..])
                .map_err(|e| PackError::io(&self.path, e))?;
            if n == 0 {
                if got == 0 && member.is_none() {
                    return Ok(false);
                }
                let what = match member {
                    Some(m) => format!("{} (member {m})", self.path),
                    None => self.path.clone(),
                };
                return Err(PackError::input(
                    what,
                    InputError::TarCut {
                        in_member: member.is_some(),
                        offset: self.pos + got as u64,
                    },
                ));
            }
            got += n;
        }
        self.pos += got as u64;
        Ok(true)
    }

    /// The data of a member of `size` bytes, and the padding after it.
    ///
    /// What the buffer holds is copied out of it; the rest of a large member is read from the
    /// file straight into the member's bytes (not through the buffer, and not zeroed first).
    fn body(&mut self, size: u64, member: &str) -> Result<Vec<u8>> {
        let len = usize::try_from(size).map_err(|_| {
            PackError::input(
                format!("{} (member {member})", self.path),
                InputError::MemberTooLarge,
            )
        })?;
        // A corrupt size must not reserve gigabytes up front: past this, the bytes read grow it.
        let mut data = Vec::with_capacity(len.min(MAX_RESERVE));
        let buffered = self.r.buffer();
        let now = buffered.len().min(len);
        data.extend_from_slice(&buffered[..now]);
        self.r.consume(now);
        self.pos += now as u64;
        let rest = len - now;
        if rest >= DIRECT_READ {
            let got = self
                .r
                .get_mut()
                .take(rest as u64)
                .read_to_end(&mut data)
                .map_err(|e| PackError::io(&self.path, e))?;
            self.pos += got as u64;
            if got < rest {
                return Err(self.cut_in(member));
            }
        } else {
            data.resize(len, 0);
            self.fill(&mut data[now..], Some(member))?;
        }
        let pad = (512 - (len % 512)) % 512;
        let mut skip = [0u8; 512];
        self.fill(&mut skip[..pad], Some(member))?;
        Ok(data)
    }

    /// The error of a tar that ends inside `member`.
    fn cut_in(&self, member: &str) -> PackError {
        PackError::input(
            format!("{} (member {member})", self.path),
            InputError::TarCut {
                in_member: true,
                offset: self.pos,
            },
        )
    }

    /// The next regular file member, or None at the end of the archive.
    fn next_member(&mut self) -> Result<Option<Member>> {
        let mut long_name: Option<String> = None;
        loop {
            let mut h = [0u8; 512];
            let at = self.pos;
            if !self.fill(&mut h, None)? {
                return Ok(None);
            }
            if h.iter().all(|&b| b == 0) {
                // End-of-archive marker.
                return Ok(None);
            }
            let bad =
                |fault| PackError::input(&self.path, InputError::TarHeader { offset: at, fault });
            let stored: u64 = h[148..156]
                .iter()
                .take_while(|&&b| b != 0 && b != b' ')
                .fold(0u64, |acc, &b| {
                    acc * 8 + u64::from(b.wrapping_sub(b'0')) % 8
                });
            if stored != checksum(&h) {
                return Err(bad(TarFault::Checksum));
            }
            let size = octal(&h[124..136]).ok_or_else(|| bad(TarFault::Size))?;
            let mut name = String::from_utf8_lossy(cstr(&h[0..100])).into_owned();
            if &h[257..262] == b"ustar" {
                let prefix = cstr(&h[345..500]);
                if !prefix.is_empty() {
                    name = format!("{}/{name}", String::from_utf8_lossy(prefix));
                }
            }
            let kind = h[156];
            match kind {
                b'L' => {
                    let data = self.body(size, &name)?;
                    long_name = Some(String::from_utf8_lossy(cstr(&data)).into_owned());
                }
                b'x' => {
                    let data = self.body(size, &name)?;
                    long_name = pax_path(&data).or(long_name);
                }
                b'0' | 0 | b'7' => {
                    let name = long_name.take().unwrap_or(name);
                    let data = self.body(size, &name)?;
                    return Ok(Some(Member { name, data }));
                }
                _ => {
                    long_name = None;
                    self.body(size, &name)?;
                }
            }
        }
    }
}

/// The `path` record of a pax extended header.
fn pax_path(data: &[u8]) -> Option<String> {
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
        let record = rest.get(space + 1..len)?;
        if let Some(v) = record.strip_prefix(b"path=") {
            let v = v.strip_suffix(b"\n").unwrap_or(v);
            return Some(String::from_utf8_lossy(v).into_owned());
        }
        rest = &rest[len..];
    }
    None
}

/// webdataset's `base_plus_ext`: (key, extension), or None for a name without a dot.
fn key_and_ext(name: &str) -> Option<(String, String)> {
    let slash = name.rfind('/').map_or(0, |i| i + 1);
    let dot = slash + name[slash..].find('.')?;
    if dot == slash {
        return None;
    }
    Some((
        name[..dot].to_string(),
        name[dot + 1..].to_ascii_lowercase(),
    ))
}

/// One member as grouping sees it: (key, extension, bytes, `path (member NAME)` for messages).
type Keyed = (String, String, Vec<u8>, String);

/// One sample: its key and (extension, bytes) members in tar order.
struct Sample {
    key: String,
    first_member: String,
    members: Vec<(String, Vec<u8>)>,
}

/// Groups the members of a sequence of tar files into samples.
struct Grouper {
    files: Vec<InputFile>,
    next_file: usize,
    tar: Option<TarReader>,
    held: Option<Keyed>,
    done_bytes: u64,
}

impl Grouper {
    fn new(files: Vec<InputFile>) -> Grouper {
        Grouper {
            files,
            next_file: 0,
            tar: None,
            held: None,
            done_bytes: 0,
        }
    }

    fn consumed(&self) -> u64 {
        self.done_bytes + self.tar.as_ref().map_or(0, |t| t.pos)
    }

    /// The next member as (key, ext, data, member name), across files.
    fn next_member(&mut self) -> Result<Option<Keyed>> {
        loop {
            if self.tar.is_none() {
                let Some(f) = self.files.get(self.next_file) else {
                    return Ok(None);
                };
                self.tar = Some(TarReader::open(f)?);
                self.next_file += 1;
            }
            let Some(tar) = self.tar.as_mut() else {
                continue;
            };
            match tar.next_member()? {
                Some(m) => {
                    if let Some((key, ext)) = key_and_ext(&m.name) {
                        let where_ = format!("{} (member {})", tar.path, m.name);
                        return Ok(Some((key, ext, m.data, where_)));
                    }
                }
                None => {
                    self.done_bytes += self.files[self.next_file - 1].size;
                    self.tar = None;
                    // Samples never span tar files.
                    return Ok(Some((
                        String::new(),
                        String::new(),
                        Vec::new(),
                        String::new(),
                    )));
                }
            }
        }
    }

    fn next_sample(&mut self) -> Result<Option<Sample>> {
        let mut cur: Option<Sample> = None;
        loop {
            let m = match self.held.take() {
                Some(m) => Some(m),
                None => self.next_member()?,
            };
            let Some((key, ext, data, where_)) = m else {
                return Ok(cur);
            };
            if key.is_empty() {
                // End of one tar file.
                if cur.is_some() {
                    return Ok(cur);
                }
                continue;
            }
            match &mut cur {
                Some(s) if s.key != key => {
                    self.held = Some((key, ext, data, where_));
                    return Ok(cur);
                }
                Some(s) => {
                    if s.members.iter().any(|(e, _)| *e == ext) {
                        return Err(PackError::input(
                            where_,
                            InputError::SecondMember { key, ext },
                        ));
                    }
                    s.members.push((ext, data));
                }
                None => {
                    cur = Some(Sample {
                        key,
                        first_member: where_,
                        members: vec![(ext, data)],
                    })
                }
            }
        }
    }
}

/// The encoding an extension suggests.
fn encoding_of(ext: &str) -> Encoding {
    match ext {
        "jpg" | "jpeg" => Encoding::Jpeg { quality: None },
        "png" => Encoding::Png,
        "txt" | "text" | "cls" | "cls2" => Encoding::Str,
        "json" => Encoding::Json,
        _ => Encoding::Bytes,
    }
}

/// The column name of the sample key.
pub const KEY_COLUMN: &str = "__key__";

/// Infers the columns from the first [`INFER_SAMPLES`] samples.
pub fn infer_columns(files: &[InputFile]) -> Result<Vec<(String, Encoding)>> {
    let mut g = Grouper::new(files.to_vec());
    let mut exts: Vec<String> = Vec::new();
    for _ in 0..INFER_SAMPLES {
        let Some(s) = g.next_sample()? else { break };
        for (e, _) in s.members {
            if !exts.contains(&e) {
                exts.push(e);
            }
        }
    }
    if exts.is_empty() {
        return Err(PackError::Options(
            "the tar files hold no sample (no member named KEY.EXT)".into(),
        ));
    }
    let mut cols = vec![(KEY_COLUMN.to_string(), Encoding::Str)];
    cols.extend(exts.into_iter().map(|e| {
        let enc = encoding_of(&e);
        (e, enc)
    }));
    Ok(cols)
}

/// Reads samples from tar files and encodes them.
pub struct TarSource {
    grouper: Grouper,
    columns: Vec<(String, Encoding)>,
    strict: bool,
}

impl TarSource {
    /// A source over `files`, encoding `columns` (sorted as the shard stores them); `strict`
    /// makes a member outside the columns an error (inferred columns).
    pub fn new(
        mut files: Vec<InputFile>,
        columns: Vec<(String, Encoding)>,
        strict: bool,
    ) -> TarSource {
        super::remote::chain(&mut files);
        TarSource {
            grouper: Grouper::new(files),
            columns,
            strict,
        }
    }
}

impl SampleSource for TarSource {
    fn next_sample(&mut self, out: &mut [Vec<u8>]) -> Result<bool> {
        let Some(mut s) = self.grouper.next_sample()? else {
            return Ok(false);
        };
        for (k, (name, enc)) in self.columns.iter().enumerate() {
            if name == KEY_COLUMN {
                encode(enc, &Field::Py(PyValue::Str(s.key.clone())), &mut out[k])
                    .map_err(|e| PackError::input(&s.first_member, InputError::Value(e)))?;
                continue;
            }
            let Some((_, data)) = s.members.iter_mut().find(|(e, _)| e == name) else {
                return Err(PackError::input(
                    &s.first_member,
                    InputError::MissingMember {
                        key: s.key.clone(),
                        ext: name.clone(),
                    },
                ));
            };
            check_stored(enc, data).map_err(|error| {
                PackError::input(
                    &s.first_member,
                    InputError::Member {
                        key: s.key.clone(),
                        ext: name.clone(),
                        error,
                    },
                )
            })?;
            // The member's bytes become the value as they are (moved, not copied).
            out[k] = std::mem::take(data);
        }
        if self.strict {
            if let Some((e, _)) = s
                .members
                .iter()
                .find(|(e, _)| !self.columns.iter().any(|(n, _)| n == e))
            {
                return Err(PackError::input(
                    &s.first_member,
                    InputError::LateMember {
                        key: s.key.clone(),
                        ext: e.clone(),
                    },
                ));
            }
        }
        Ok(true)
    }

    fn consumed(&self) -> u64 {
        self.grouper.consumed()
    }
}
