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
use super::pyvalue::{loads, PyValue};
use super::source::{InputFile, SampleSource};
use crate::mds::Encoding;
use std::io::{BufRead, BufReader, Read};

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

/// Reads the lines of a byte range of the input and encodes them into columns.
pub struct JsonlSource {
    files: Vec<InputFile>,
    /// Global byte range of this part: lines starting in it are read.
    range: (u64, u64),
    columns: Vec<(String, Encoding)>,
    /// Whether fields outside `columns` are an error (inferred columns) or ignored.
    strict: bool,
    next_file: usize,
    reader: Option<Reader>,
    line: Vec<u8>,
    consumed: u64,
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
    /// `columns` (sorted as the shard stores them).
    pub fn new(
        files: Vec<InputFile>,
        range: (u64, u64),
        columns: Vec<(String, Encoding)>,
        strict: bool,
    ) -> JsonlSource {
        JsonlSource {
            files,
            range,
            columns,
            strict,
            next_file: 0,
            reader: None,
            line: Vec::new(),
            consumed: 0,
        }
    }

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
                self.line.clear();
                let n = r.read_until(b'\n', &mut self.line).map_err(ioerr)?;
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

    fn where_(&self, file: usize, number: u64) -> String {
        format!("{}:{number}", self.files[file].path.display())
    }
}

impl SampleSource for JsonlSource {
    fn next_sample(&mut self, out: &mut [Vec<u8>]) -> Result<bool> {
        loop {
            if self.reader.is_none() && !self.open_next()? {
                return Ok(false);
            }
            let Some(rd) = self.reader.as_mut() else {
                return Ok(false);
            };
            if rd.pos >= rd.stop {
                self.reader = None;
                self.next_file = self.files.len();
                return Ok(false);
            }
            self.line.clear();
            let n =
                rd.r.read_until(b'\n', &mut self.line)
                    .map_err(|e| PackError::io(self.files[rd.file].path.display(), e))?;
            if n == 0 {
                self.reader = None;
                continue;
            }
            rd.pos += n as u64;
            self.consumed += n as u64;
            let (file, number) = (rd.file, rd.number);
            rd.number += 1;
            if is_blank(&self.line) {
                continue;
            }
            let items = parse_object(&self.line, || self.where_(file, number))?;
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
            return Ok(true);
        }
    }

    fn consumed(&self) -> u64 {
        self.consumed
    }
}
