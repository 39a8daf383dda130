//! JSON Lines input: one JSON object per line, a column per field.
//!
//! INPUT is one file, or a folder whose `*.jsonl`, `*.ndjson` and `*.json` files are read in
//! sorted name order as one long file; blank lines are skipped. Samples keep file order, so a
//! pack is reproducible.
//!
//! Columns are inferred from the first [`INFER_ROWS`] objects of the whole input (every
//! `--part` reads the same prefix, so all parts agree): a field of strings is `str`, of
//! integers `int`, of floats (or integers and floats) `float64`, of anything else `json`;
//! a field that is only ever `null` there is `json`. A field whose values then change type,
//! or a field that first appears later, stops the pack with an error naming the line (give
//! `--columns` to choose). With `--columns`, fields not listed are ignored, as `MDSWriter`
//! ignores keys it has no column for.
//!
//! `--part K/N` splits the input's bytes into N equal ranges; a part packs the lines that
//! start in its range (the usual split of line-oriented files), so the parts are disjoint,
//! cover every line, and keep its order.

use super::columns::{encode_py, infer, widen};
use super::error::{InputError, PackError, Result};
use super::pyvalue::{flat_object, loads, Member, PyValue};
use super::source::{InputFile, SampleSource};
use crate::mds::{Dtype, Encoding};
use std::io::{BufRead, BufReader, Read};
use std::sync::{mpsc, Arc};

/// How many objects column inference looks at.
pub const INFER_ROWS: usize = 1000;

fn open(file: &InputFile) -> Result<BufReader<Box<dyn Read + Send>>> {
    Ok(BufReader::with_capacity(1 << 20, file.open_at(0)?))
}

fn is_blank(line: &[u8]) -> bool {
    line.iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

fn parse_object(line: &[u8], where_: impl Fn() -> String) -> Result<Vec<(String, PyValue)>> {
    match loads(line) {
        Ok(PyValue::Dict(items)) => Ok(items),
        Ok(other) => Err(PackError::input(
            where_(),
            InputError::NotAnObject(other.type_name()),
        )),
        Err(e) => Err(PackError::input(where_(), InputError::NotJson(e))),
    }
}

/// Infers the columns from the first [`INFER_ROWS`] objects of `files`.
pub fn infer_columns(files: &[InputFile]) -> Result<Vec<(String, Encoding)>> {
    // (name, encoding so far or None while only nulls were seen, line that set it)
    let mut cols: Vec<(String, Option<Encoding>, String)> = Vec::new();
    let mut rows = 0;
    let mut line = Vec::new();
    'files: for file in files {
        let mut r = open(file)?;
        let mut number = 0u64;
        loop {
            line.clear();
            let n = r
                .read_until(b'\n', &mut line)
                .map_err(|e| PackError::io(file.path.display(), e))?;
            if n == 0 {
                break;
            }
            number += 1;
            if is_blank(&line) {
                continue;
            }
            let here = || format!("{}:{number}", file.path.display());
            for (name, v) in parse_object(&line, here)? {
                let new = infer(&v);
                match cols.iter_mut().find(|c| c.0 == name) {
                    None => cols.push((name, new, here())),
                    Some(slot) => match (&slot.1, new) {
                        (_, None) => {}
                        (None, Some(e)) => {
                            slot.1 = Some(e);
                            slot.2 = here();
                        }
                        (Some(old), Some(e)) => match widen(old, &e) {
                            Some(w) => slot.1 = Some(w),
                            None => {
                                return Err(PackError::input(
                                    here(),
                                    InputError::FieldChangesType {
                                        field: name,
                                        found: v.type_name(),
                                        before: old.clone(),
                                        at: slot.2.clone(),
                                    },
                                ))
                            }
                        },
                    },
                }
            }
            rows += 1;
            if rows >= INFER_ROWS {
                break 'files;
            }
        }
    }
    if cols.is_empty() {
        return Err(PackError::Options(
            "the input holds no JSON object to infer columns from".into(),
        ));
    }
    Ok(cols
        .into_iter()
        .map(|(name, enc, _)| (name, enc.unwrap_or(Encoding::Json)))
        .collect())
}

/// Bytes of whole lines in one batch a parse worker takes, about (a batch ends after the line
/// that passes it, and at the end of a file).
pub const BATCH_BYTES: usize = 1 << 20;

/// Reads the lines of a byte range of the input and encodes them into columns, in input order.
///
/// Reading and parsing are split (see the module note of [`crate::pack`]): a reader thread
/// cuts the input into batches of whole lines ([`BATCH_BYTES`]) and deals them round-robin to
/// `threads` parse workers, each with a queue of one batch in and one encoded batch out; this
/// source takes the encoded batches back in the same round-robin order, so samples (and the
/// first error, after the samples before it) come exactly in input order. At most
/// `3 × threads + 2` batches are in memory.
pub struct JsonlSource {
    /// What the threads need, until they are started (at the first sample).
    start: Option<Start>,
    threads: usize,
    /// Each worker's queue of encoded batches.
    outs: Vec<mpsc::Receiver<Encoded>>,
    /// Batches taken so far (the next comes from worker `taken % threads`).
    taken: usize,
    current: Encoded,
    /// Next value of `current` to hand out.
    at: usize,
    consumed: u64,
}

/// What starting the threads takes.
struct Start {
    lines: LineReader,
    ctx: Arc<Ctx>,
}

/// What a parse worker needs to encode a line.
struct Ctx {
    /// Paths of the input files, for messages.
    paths: Vec<String>,
    columns: Vec<(String, Encoding)>,
    /// Whether fields outside `columns` are an error (inferred columns) or ignored.
    strict: bool,
}

/// Whole lines of one file.
#[derive(Default)]
struct Lines {
    file: usize,
    /// Line number of the first line.
    first: u64,
    bytes: Vec<u8>,
    /// A read error after these lines.
    error: Option<PackError>,
    /// Whether the input (or this part) ends with this batch.
    last: bool,
}

/// The samples of one [`Lines`], encoded: the values of sample `i`, column `k` are
/// `data[ends[i·C + k - 1]..ends[i·C + k]]` (from 0 for the first).
#[derive(Default)]
struct Encoded {
    data: Vec<u8>,
    ends: Vec<usize>,
    /// Input bytes of the batch.
    consumed: u64,
    /// The error that stopped the batch, after the samples before it.
    error: Option<PackError>,
    last: bool,
}

/// The input's lines that start in the part's byte range, file after file.
struct LineReader {
    files: Vec<InputFile>,
    /// Global byte range of this part: lines starting in it are read.
    range: (u64, u64),
    next_file: usize,
    reader: Option<Reader>,
}

struct Reader {
    file: usize,
    r: BufReader<Box<dyn Read + Send>>,
    /// Global offset of the next line's first byte.
    pos: u64,
    /// Line number of the next line.
    number: u64,
    /// Global offset where this part stops reading.
    stop: u64,
}

impl JsonlSource {
    /// A source over `files` for the lines that start in global byte range `range`, encoding
    /// `columns` (sorted as the shard stores them), parsed on `threads` workers.
    pub fn new(
        mut files: Vec<InputFile>,
        range: (u64, u64),
        columns: Vec<(String, Encoding)>,
        strict: bool,
        threads: usize,
    ) -> JsonlSource {
        // The objects this part reads (those that overlap its range), read ahead as one chain.
        let mut start = 0u64;
        let mut read: Vec<usize> = Vec::new();
        for (i, f) in files.iter().enumerate() {
            if start + f.size > range.0 && start < range.1 {
                read.push(i);
            }
            start += f.size;
        }
        if let (Some(&a), Some(&b)) = (read.first(), read.last()) {
            super::remote::chain(&mut files[a..=b]);
        }
        let ctx = Arc::new(Ctx {
            paths: files.iter().map(|f| f.path.display().to_string()).collect(),
            columns,
            strict,
        });
        let lines = LineReader {
            files,
            range,
            next_file: 0,
            reader: None,
        };
        JsonlSource {
            start: Some(Start { lines, ctx }),
            threads: threads.max(1),
            outs: Vec::new(),
            taken: 0,
            current: Encoded::default(),
            at: 0,
            consumed: 0,
        }
    }

    /// Starts the reader and the parse workers.
    fn start(&mut self, start: Start) -> Result<()> {
        let spawn_err = |e: std::io::Error| {
            PackError::Internal(format!("cannot start a JSON Lines thread: {e}"))
        };
        let mut ins = Vec::new();
        for _ in 0..self.threads {
            let (tx, rx) = mpsc::sync_channel::<Lines>(1);
            let (otx, orx) = mpsc::sync_channel::<Encoded>(1);
            let ctx = Arc::clone(&start.ctx);
            std::thread::Builder::new()
                .name("shardfs-pack-parse".into())
                .spawn(move || {
                    // A closed queue either way: the pack stopped, or the input ended.
                    while let Ok(lines) = rx.recv() {
                        if otx.send(ctx.encode(lines)).is_err() {
                            return;
                        }
                    }
                })
                .map_err(spawn_err)?;
            ins.push(tx);
            self.outs.push(orx);
        }
        let mut lines = start.lines;
        std::thread::Builder::new()
            .name("shardfs-pack-read".into())
            .spawn(move || {
                for tx in ins.iter().cycle() {
                    let batch = lines.batch();
                    let last = batch.last;
                    if tx.send(batch).is_err() || last {
                        return;
                    }
                }
            })
            .map_err(spawn_err)?;
        Ok(())
    }
}

impl LineReader {
    /// Opens the next file that overlaps the range, positioned at its first line in range.
    fn open_next(&mut self) -> Result<bool> {
        let mut start = 0u64;
        for f in &self.files[..self.next_file] {
            start += f.size;
        }
        while self.next_file < self.files.len() {
            let idx = self.next_file;
            let file = &self.files[idx];
            let (fstart, fend) = (start, start + file.size);
            self.next_file += 1;
            start = fend;
            if fend <= self.range.0 || fstart >= self.range.1 {
                continue;
            }
            let mut r = open(file)?;
            let ioerr = |e| PackError::io(file.path.display(), e);
            let (mut pos, mut number) = (fstart, 1u64);
            if self.range.0 > fstart {
                // Count the lines before the range (for line numbers in errors), reading up to
                // the byte before it, then land on the first line that starts at or after the
                // range's start.
                let skip = self.range.0 - fstart;
                let mut left = skip - 1;
                let mut buf = vec![0u8; 1 << 20];
                while left > 0 {
                    let want = left.min(buf.len() as u64) as usize;
                    let got = r.read(&mut buf[..want]).map_err(ioerr)?;
                    if got == 0 {
                        break;
                    }
                    number += buf[..got].iter().filter(|&&b| b == b'\n').count() as u64;
                    left -= got as u64;
                }
                pos = fstart + skip - 1;
                // The byte before the range: a newline means a line starts right at the range.
                let mut line = Vec::new();
                let n = r.read_until(b'\n', &mut line).map_err(ioerr)?;
                pos += n as u64;
                number += 1;
            }
            self.reader = Some(Reader {
                file: idx,
                r,
                pos,
                number,
                stop: self.range.1,
            });
            return Ok(true);
        }
        Ok(false)
    }

    /// The next batch of whole lines (of one file); `last` at the end of the range.
    fn batch(&mut self) -> Lines {
        // Room for a whole batch and the line that passes it, mostly: no growing copies.
        let mut out = Lines {
            bytes: Vec::with_capacity(BATCH_BYTES + (64 << 10)),
            ..Lines::default()
        };
        loop {
            if self.reader.is_none() {
                match self.open_next() {
                    Ok(true) => {}
                    Ok(false) => {
                        out.last = true;
                        return out;
                    }
                    Err(e) => {
                        out.error = Some(e);
                        out.last = true;
                        return out;
                    }
                }
            }
            let Some(rd) = self.reader.as_mut() else {
                out.last = true;
                return out;
            };
            if out.bytes.is_empty() {
                out.file = rd.file;
                out.first = rd.number;
            }
            loop {
                if rd.pos >= rd.stop {
                    self.reader = None;
                    self.next_file = self.files.len();
                    out.last = true;
                    return out;
                }
                let n = match rd.r.read_until(b'\n', &mut out.bytes) {
                    Ok(n) => n,
                    Err(e) => {
                        out.error = Some(PackError::io(self.files[rd.file].path.display(), e));
                        out.last = true;
                        return out;
                    }
                };
                if n == 0 {
                    self.reader = None;
                    break;
                }
                rd.pos += n as u64;
                rd.number += 1;
                if out.bytes.len() >= BATCH_BYTES {
                    return out;
                }
            }
            // The file ended: its lines go in a batch of their own.
            if !out.bytes.is_empty() {
                return out;
            }
        }
    }
}

impl Ctx {
    fn where_(&self, file: usize, number: u64) -> String {
        format!("{}:{number}", self.paths[file])
    }

    /// Encodes every line of `lines` (stopping at the first bad one).
    fn encode(&self, lines: Lines) -> Encoded {
        // The stored values take about as many bytes as their text.
        let mut out = Encoded {
            data: Vec::with_capacity(lines.bytes.len()),
            consumed: lines.bytes.len() as u64,
            last: lines.last,
            ..Encoded::default()
        };
        let mut values: Vec<Vec<u8>> = vec![Vec::new(); self.columns.len()];
        let mut number = lines.first;
        let mut rest = &lines.bytes[..];
        while !rest.is_empty() {
            let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
            let (line, tail) = rest.split_at(end);
            rest = tail;
            for v in values.iter_mut() {
                v.clear();
            }
            match self.encode_line(line, lines.file, number, &mut values) {
                Ok(true) => {
                    for v in &values {
                        out.data.extend_from_slice(v);
                        out.ends.push(out.data.len());
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    out.error = Some(e);
                    out.last = true;
                    return out;
                }
            }
            number += 1;
        }
        out.error = lines.error;
        out
    }

    /// The fast way to encode one line into `out`: straight from the text ([`flat_object`]),
    /// no object built, for a line whose keys hold no escape and name each column once.
    /// False for any other line (a field missing or repeated, an unknown one with inferred
    /// columns, a value its column refuses, not JSON): [`Ctx::encode_line`] then reads it the
    /// full way, which stores the same bytes or says what is wrong.
    fn encode_flat(&self, line: &[u8], out: &mut [Vec<u8>]) -> bool {
        let columns = self.columns.len();
        if columns > 64 {
            return false;
        }
        let mut seen = 0u64;
        let read = flat_object(line, |key, value| {
            let Some(k) = self.columns.iter().position(|(n, _)| n == key) else {
                // MDSWriter ignores a key it has no column for; inferred columns refuse it.
                return (!self.strict).then_some(());
            };
            if seen & (1 << k) != 0 {
                return None;
            }
            seen |= 1 << k;
            let (enc, out) = (&self.columns[k].1, &mut out[k]);
            match (enc, value) {
                (Encoding::Str | Encoding::Bytes, Member::Str(s)) => {
                    out.extend_from_slice(s.as_bytes())
                }
                (Encoding::Int, Member::Int(t)) => {
                    out.extend_from_slice(&t.parse::<i64>().ok()?.to_le_bytes())
                }
                (Encoding::Scalar(Dtype::F64), Member::Int(t)) => {
                    out.extend_from_slice(&t.parse::<f64>().ok()?.to_le_bytes())
                }
                (Encoding::Scalar(Dtype::F64), Member::Float(x)) => {
                    out.extend_from_slice(&x.to_le_bytes())
                }
                (enc, value) => encode_py(enc, &value.into_py(), out).ok()?,
            }
            Some(())
        });
        let all = if columns == 64 {
            u64::MAX
        } else {
            (1 << columns) - 1
        };
        read.is_some() && seen == all
    }

    /// Encodes one line into `out` (a buffer per column); false for a blank line.
    fn encode_line(
        &self,
        line: &[u8],
        file: usize,
        number: u64,
        out: &mut [Vec<u8>],
    ) -> Result<bool> {
        if is_blank(line) {
            return Ok(false);
        }
        if self.encode_flat(line, out) {
            return Ok(true);
        }
        for v in out.iter_mut() {
            v.clear();
        }
        let items = parse_object(line, || self.where_(file, number))?;
        for (k, (name, enc)) in self.columns.iter().enumerate() {
            let Some((_, v)) = items.iter().find(|(key, _)| key == name) else {
                return Err(PackError::input(
                    self.where_(file, number),
                    InputError::MissingField(name.clone()),
                ));
            };
            encode_py(enc, v, &mut out[k]).map_err(|error| {
                PackError::input(
                    self.where_(file, number),
                    InputError::Field {
                        field: name.clone(),
                        encoding: enc.clone(),
                        error,
                    },
                )
            })?;
        }
        if self.strict {
            if let Some((extra, _)) = items
                .iter()
                .find(|(key, _)| !self.columns.iter().any(|(n, _)| n == key))
            {
                return Err(PackError::input(
                    self.where_(file, number),
                    InputError::LateField(extra.clone()),
                ));
            }
        }
        Ok(true)
    }
}

impl SampleSource for JsonlSource {
    fn next_sample(&mut self, out: &mut [Vec<u8>]) -> Result<bool> {
        if let Some(start) = self.start.take() {
            self.start(start)?;
        }
        let columns = out.len();
        loop {
            if self.at < self.current.ends.len() {
                let mut from = match self.at {
                    0 => 0,
                    i => self.current.ends[i - 1],
                };
                for o in out.iter_mut() {
                    let to = self.current.ends[self.at];
                    o.extend_from_slice(&self.current.data[from..to]);
                    from = to;
                    self.at += 1;
                }
                return Ok(true);
            }
            if let Some(e) = self.current.error.take() {
                self.current.last = true;
                return Err(e);
            }
            if self.current.last {
                return Ok(false);
            }
            let Some(rx) = self.outs.get(self.taken % self.threads) else {
                return Ok(false);
            };
            match rx.recv() {
                Ok(next) => {
                    self.taken += 1;
                    self.consumed += next.consumed;
                    debug_assert_eq!(next.ends.len() % columns.max(1), 0);
                    self.current = next;
                    self.at = 0;
                }
                Err(_) => {
                    self.current.last = true;
                    return Err(PackError::Internal(
                        "a JSON Lines parse thread stopped".into(),
                    ));
                }
            }
        }
    }

    fn consumed(&self) -> u64 {
        self.consumed
    }
}
