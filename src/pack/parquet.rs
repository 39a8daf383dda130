//! Parquet input: one `.parquet` file, or a folder of them read in sorted name order as one
//! table; a sample per row, in row order.
//!
//! Columns are the top-level fields of the schema, their encodings told by the schema (not
//! by sampling values), as a Python script that feeds pyarrow's `to_pylist()` rows to
//! `MDSWriter` would choose them:
//!
//! | Parquet type | column | stored as |
//! |---|---|---|
//! | string (`BYTE_ARRAY` UTF8) | `str` | the UTF-8 text |
//! | binary (`BYTE_ARRAY`, `FIXED_LEN_BYTE_ARRAY` without a logical type) | `bytes` | the bytes |
//! | `INT32`/`INT64` (signed or unsigned, 8 to 64 bits) | `int` | `np.int64(v)` |
//! | `FLOAT`/`DOUBLE` | `float64` | `np.float64(v)` (a float32 widened exactly) |
//! | `BOOLEAN`, lists, structs, maps | `json` | `json.dumps(v)`: `true`, `[…]`, `{…}` in field order, a map as a list of `[key, value]` pairs (pyarrow gives a map as `(key, value)` tuples) |
//!
//! A null in a `str`, `int`, `float64` or `bytes` column stops the pack with an error naming
//! the file, row and field (give the column as `json` with `--columns` to store `null`); nulls
//! inside lists and structs are JSON `null`. Dates, times, timestamps, decimals, intervals,
//! float16 and INT96 have no MDS counterpart a script would get without choosing a
//! conversion, so a schema that holds one is refused with the field's name (leave the field
//! out with `--columns`, or cast it before packing); so is binary inside a list or struct
//! (Python's `json` cannot write bytes). Every file must give the same columns as the first.
//! With `--columns`, only the listed fields are read (the others are never decoded).
//!
//! `--part K/N` splits the rows: with R rows in all (from the files' footers), part K packs
//! rows `[K·R/N, (K+1)·R/N)` in order, reading only the row groups that hold them; so the
//! parts are disjoint, cover every row, and the merged dataset keeps the row order.
//!
//! Rows are read with the `parquet` crate's record reader, which can panic on some malformed
//! files; a panic while reading a file is caught and reported as an error naming the file.

use super::columns::{check_stored, encode, Field};
use super::error::{InputError, PackError, Result};
use super::pyvalue::PyValue;
use super::remote::RangedObject;
use super::source::{InputFile, SampleSource};
use crate::mds::{Dtype, Encoding};
use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::file::reader::{ChunkReader, FileReader, SerializedFileReader};
use parquet::file::serialized_reader::ReadOptionsBuilder;
use parquet::record::reader::RowIter;
use parquet::record::{Field as PqField, Row};
use parquet::schema::types::{Type, TypePtr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A Parquet reader over `file` (a local file, or an object read by ranges) that keeps only
/// the row groups `keep` accepts (by index).
fn open(file: &InputFile, keep: Box<dyn FnMut(usize) -> bool>) -> Result<Box<dyn FileReader>> {
    if let Some(r) = &file.remote {
        return reader_over(RangedObject::new(r.clone(), file.size), file, keep);
    }
    let f = std::fs::File::open(&file.path).map_err(|e| PackError::io(file.path.display(), e))?;
    reader_over(f, file, keep)
}

/// A Parquet reader over `chunks` (the bytes of `file`), keeping the row groups `keep` accepts.
fn reader_over<R: ChunkReader + 'static>(
    chunks: R,
    file: &InputFile,
    mut keep: Box<dyn FnMut(usize) -> bool>,
) -> Result<Box<dyn FileReader>> {
    let opts = ReadOptionsBuilder::new()
        .with_predicate(Box::new(move |_, i| keep(i)))
        .build();
    let opened = catch_unwind(AssertUnwindSafe(|| {
        SerializedFileReader::new_with_options(chunks, opts)
    }));
    match opened {
        Ok(Ok(r)) => Ok(Box::new(r)),
        Ok(Err(e)) => Err(bad_file(file, None, why(e))),
        Err(_) => Err(bad_file(file, None, "the reader failed on it".into())),
    }
}

/// A Parquet error's text without the crate's own "Parquet error: " prefix (the message says
/// Parquet already).
fn why(e: parquet::errors::ParquetError) -> String {
    let text = e.to_string();
    match text.strip_prefix("Parquet error: ") {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

fn bad_file(file: &InputFile, row: Option<u64>, why: String) -> PackError {
    let where_ = match row {
        Some(r) => format!("{} (row {r})", file.path.display()),
        None => file.path.display().to_string(),
    };
    PackError::input(where_, InputError::Parquet(why))
}

/// What one file's footer says: the encodings of its top-level fields (in schema order) and
/// its row groups' row counts.
struct Footer {
    fields: Vec<(String, std::result::Result<Encoding, String>)>,
    row_groups: Vec<u64>,
    schema: TypePtr,
}

fn footer(file: &InputFile) -> Result<Footer> {
    let r = open(file, Box::new(|_| true))?;
    let meta = r.metadata();
    let schema = meta.file_metadata().schema_descr().root_schema_ptr();
    let fields = schema
        .get_fields()
        .iter()
        .map(|f| (f.name().to_string(), encoding_of(f)))
        .collect();
    let row_groups = meta
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.num_rows()).unwrap_or(0))
        .collect();
    Ok(Footer {
        fields,
        row_groups,
        schema,
    })
}

/// The column a top-level field infers, or why it cannot be stored.
fn encoding_of(t: &Type) -> std::result::Result<Encoding, String> {
    if t.is_group() || t.get_basic_info().repetition() == parquet::basic::Repetition::REPEATED {
        check_nested(t)?;
        return Ok(Encoding::Json);
    }
    leaf_encoding(t)
}

/// The column a primitive field infers (see the module note).
fn leaf_encoding(t: &Type) -> std::result::Result<Encoding, String> {
    let info = t.get_basic_info();
    let logical = info.logical_type_ref();
    let converted = info.converted_type();
    let refuse = || {
        let what = match logical {
            Some(l) => {
                let text = format!("{l:?}");
                let end = text.find(['(', '{', ' ']).unwrap_or(text.len());
                text[..end].to_string()
            }
            None if converted != ConvertedType::NONE => converted.to_string(),
            None => t.get_physical_type().to_string(),
        };
        Err(format!(
            "field {:?} has the Parquet type {what}, which pack does not convert; leave it \
             out with --columns or cast it before packing",
            t.name()
        ))
    };
    let plain = logical.is_none() && converted == ConvertedType::NONE;
    match t.get_physical_type() {
        Physical::BOOLEAN if plain => Ok(Encoding::Json),
        Physical::INT32 | Physical::INT64
            if matches!(logical, None | Some(LogicalType::Integer { .. }))
                && matches!(
                    converted,
                    ConvertedType::NONE
                        | ConvertedType::INT_8
                        | ConvertedType::INT_16
                        | ConvertedType::INT_32
                        | ConvertedType::INT_64
                        | ConvertedType::UINT_8
                        | ConvertedType::UINT_16
                        | ConvertedType::UINT_32
                        | ConvertedType::UINT_64
                ) =>
        {
            Ok(Encoding::Int)
        }
        Physical::FLOAT | Physical::DOUBLE if plain => Ok(Encoding::Scalar(Dtype::F64)),
        Physical::BYTE_ARRAY
            if matches!(logical, None | Some(LogicalType::String))
                && converted == ConvertedType::UTF8 =>
        {
            Ok(Encoding::Str)
        }
        Physical::BYTE_ARRAY | Physical::FIXED_LEN_BYTE_ARRAY if plain => Ok(Encoding::Bytes),
        _ => refuse(),
    }
}

/// Checks every leaf below a nested field converts to a JSON value.
fn check_nested(t: &Type) -> std::result::Result<(), String> {
    if t.is_group() {
        let info = t.get_basic_info();
        let ok = matches!(
            info.logical_type_ref(),
            None | Some(LogicalType::List) | Some(LogicalType::Map)
        ) && matches!(
            info.converted_type(),
            ConvertedType::NONE
                | ConvertedType::LIST
                | ConvertedType::MAP
                | ConvertedType::MAP_KEY_VALUE
        );
        if !ok {
            return Err(format!(
                "field {:?} is a Parquet group of a kind pack does not convert",
                t.name()
            ));
        }
        return t.get_fields().iter().try_for_each(|f| check_nested(f));
    }
    match leaf_encoding(t)? {
        Encoding::Bytes => Err(format!(
            "field {:?} is binary inside a list or struct, which JSON cannot hold; leave it out \
             with --columns",
            t.name()
        )),
        _ => Ok(()),
    }
}

/// The files and what their footers say, checked to agree.
pub struct Scan {
    files: Vec<InputFile>,
    /// Row counts of each file's row groups.
    row_groups: Vec<Vec<u64>>,
    /// Each file's root schema.
    schemas: Vec<TypePtr>,
    /// The first file's fields and what they infer.
    fields: Vec<(String, std::result::Result<Encoding, String>)>,
}

impl Scan {
    /// Reads every file's footer.
    pub fn new(files: Vec<InputFile>) -> Result<Scan> {
        let mut row_groups = Vec::new();
        let mut schemas = Vec::new();
        let mut fields = Vec::new();
        for (i, file) in files.iter().enumerate() {
            let f = footer(file)?;
            if i == 0 {
                fields = f.fields;
            }
            row_groups.push(f.row_groups);
            schemas.push(f.schema);
        }
        Ok(Scan {
            files,
            row_groups,
            schemas,
            fields,
        })
    }

    /// Rows in all the files.
    pub fn rows(&self) -> u64 {
        self.row_groups.iter().flatten().sum()
    }

    /// Bytes of all the files (for progress).
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The inferred columns: every top-level field of the first file, in schema order; every
    /// other file must have the same fields with the same encodings.
    pub fn infer_columns(&self) -> Result<Vec<(String, Encoding)>> {
        let mut out = Vec::new();
        for (name, enc) in &self.fields {
            match enc {
                Ok(e) => out.push((name.clone(), e.clone())),
                Err(why) => return Err(bad_file(&self.files[0], None, why.clone())),
            }
        }
        if out.is_empty() {
            return Err(bad_file(
                &self.files[0],
                None,
                "the schema has no field".into(),
            ));
        }
        for (file, schema) in self.files.iter().zip(&self.schemas).skip(1) {
            let theirs: Vec<(String, std::result::Result<Encoding, String>)> = schema
                .get_fields()
                .iter()
                .map(|f| (f.name().to_string(), encoding_of(f)))
                .collect();
            if theirs != self.fields {
                return Err(bad_file(
                    file,
                    None,
                    format!(
                        "its fields ({}) differ from those of {} ({}); give --columns to pack \
                         the fields they share",
                        field_list(&theirs),
                        self.files[0].path.display(),
                        field_list(&self.fields)
                    ),
                ));
            }
        }
        Ok(out)
    }
}

fn field_list(fields: &[(String, std::result::Result<Encoding, String>)]) -> String {
    fields
        .iter()
        .map(|(n, e)| match e {
            Ok(e) => format!("{n}:{e}"),
            Err(_) => format!("{n}:?"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads rows `[start, end)` of the scanned files and encodes them into columns.
pub struct ParquetSource {
    scan: Scan,
    range: (u64, u64),
    columns: Vec<(String, Encoding)>,
    /// The next file to open.
    next_file: usize,
    /// Global number of the first row of `next_file`.
    next_file_start: u64,
    current: Option<Current>,
    consumed: u64,
}

struct Current {
    file: usize,
    rows: RowIter<'static>,
    /// Global number of the row `rows` gives next.
    row: u64,
    /// Row number of the file's first row `rows` gives (for messages).
    file_start: u64,
    /// For each field of the projected row, its column's index in the output.
    slots: Vec<usize>,
    /// Bytes of the file, counted as consumed once it is done.
    size: u64,
}

impl ParquetSource {
    /// A source over rows `range` of `scan`'s files, encoding `columns` (sorted as the shard
    /// stores them).
    pub fn new(scan: Scan, range: (u64, u64), columns: Vec<(String, Encoding)>) -> ParquetSource {
        ParquetSource {
            scan,
            range,
            columns,
            next_file: 0,
            next_file_start: 0,
            current: None,
            consumed: 0,
        }
    }

    /// Opens the next file holding rows of the range, at its first row group that does.
    fn open_next(&mut self) -> Result<bool> {
        while self.next_file < self.scan.files.len() {
            let idx = self.next_file;
            let start = self.next_file_start;
            let groups = self.scan.row_groups[idx].clone();
            let rows: u64 = groups.iter().sum();
            self.next_file += 1;
            self.next_file_start += rows;
            let (a, b) = self.range;
            if start + rows <= a || start >= b {
                continue;
            }
            // Keep the row groups that overlap the range; `first` is where the kept ones start.
            let mut first = None;
            let mut at = start;
            let mut keep = Vec::with_capacity(groups.len());
            for n in &groups {
                let overlaps = at + n > a && at < b && *n > 0;
                if overlaps && first.is_none() {
                    first = Some(at);
                }
                keep.push(overlaps);
                at += n;
            }
            let Some(first) = first else { continue };
            let file = &self.scan.files[idx];
            let reader = open(
                file,
                Box::new(move |i| keep.get(i).copied().unwrap_or(false)),
            )?;
            let schema = &self.scan.schemas[idx];
            let mut projected = Vec::new();
            let mut slots = Vec::new();
            for field in schema.get_fields() {
                if let Some(k) = self.columns.iter().position(|(n, _)| n == field.name()) {
                    projected.push(Arc::clone(field));
                    slots.push(k);
                }
            }
            if let Some((missing, _)) = self
                .columns
                .iter()
                .find(|(n, _)| !schema.get_fields().iter().any(|f| f.name() == n))
            {
                return Err(PackError::input(
                    file.path.display().to_string(),
                    InputError::MissingField(missing.clone()),
                ));
            }
            let projection = Type::group_type_builder(schema.name())
                .with_fields(projected)
                .build()
                .map_err(|e| bad_file(file, None, why(e)))?;
            let rows = RowIter::from_file_into(reader)
                .project(Some(projection))
                .map_err(|e| bad_file(file, None, why(e)))?;
            let mut cur = Current {
                file: idx,
                rows,
                row: first,
                file_start: start,
                slots,
                size: file.size,
            };
            while cur.row < a {
                next_row(&mut cur, &self.scan.files[idx])?;
            }
            self.current = Some(cur);
            return Ok(true);
        }
        Ok(false)
    }
}

/// The next row of the current file, or an error naming it (a panic of the reader included).
fn next_row(cur: &mut Current, file: &InputFile) -> Result<Option<Row>> {
    let at = cur.row - cur.file_start;
    let got = catch_unwind(AssertUnwindSafe(|| cur.rows.next()));
    match got {
        Ok(Some(Ok(row))) => {
            cur.row += 1;
            Ok(Some(row))
        }
        Ok(None) => Ok(None),
        Ok(Some(Err(e))) => Err(bad_file(file, Some(at), why(e))),
        Err(_) => Err(bad_file(file, Some(at), "the reader failed on it".into())),
    }
}

impl SampleSource for ParquetSource {
    fn next_sample(&mut self, out: &mut [Vec<u8>]) -> Result<bool> {
        loop {
            if self.current.is_none() && !self.open_next()? {
                return Ok(false);
            }
            let Some(cur) = self.current.as_mut() else {
                return Ok(false);
            };
            if cur.row >= self.range.1 {
                self.current = None;
                self.next_file = self.scan.files.len();
                return Ok(false);
            }
            let file = &self.scan.files[cur.file];
            let at = cur.row - cur.file_start;
            let Some(row) = next_row(cur, file)? else {
                self.consumed += cur.size;
                self.current = None;
                continue;
            };
            let here = || format!("{} (row {at})", file.path.display());
            for (slot, (name, value)) in cur.slots.iter().zip(row.into_columns()) {
                let (col, enc) = &self.columns[*slot];
                let field = field_of(value, true).map_err(|e| {
                    PackError::input(
                        here(),
                        InputError::Field {
                            field: name.clone(),
                            encoding: enc.clone(),
                            error: e,
                        },
                    )
                })?;
                let err = |error| {
                    PackError::input(
                        here(),
                        InputError::Field {
                            field: col.clone(),
                            encoding: enc.clone(),
                            error,
                        },
                    )
                };
                if let Field::Raw(bytes) = &field {
                    check_stored(enc, bytes).map_err(err)?;
                }
                encode(enc, &field, &mut out[*slot]).map_err(err)?;
            }
            return Ok(true);
        }
    }

    fn consumed(&self) -> u64 {
        self.consumed
    }
}

/// One Parquet value as the Python value pyarrow's `to_pylist()` gives (binary as raw bytes
/// at the top level only: `json` cannot hold it).
fn field_of(v: PqField, top: bool) -> std::result::Result<Field, super::error::ValueError> {
    let int = |t: String| Ok(Field::Py(PyValue::Int(t)));
    match v {
        PqField::Null => Ok(Field::Py(PyValue::Null)),
        PqField::Bool(b) => Ok(Field::Py(PyValue::Bool(b))),
        PqField::Byte(x) => int(x.to_string()),
        PqField::Short(x) => int(x.to_string()),
        PqField::Int(x) => int(x.to_string()),
        PqField::Long(x) => int(x.to_string()),
        PqField::UByte(x) => int(x.to_string()),
        PqField::UShort(x) => int(x.to_string()),
        PqField::UInt(x) => int(x.to_string()),
        PqField::ULong(x) => int(x.to_string()),
        PqField::Float(x) => Ok(Field::Py(PyValue::Float(f64::from(x)))),
        PqField::Double(x) => Ok(Field::Py(PyValue::Float(x))),
        PqField::Str(s) => Ok(Field::Py(PyValue::Str(s))),
        PqField::Bytes(b) if top => Ok(Field::Raw(b.data().to_vec())),
        PqField::Group(row) => {
            let mut items = Vec::new();
            for (k, v) in row.into_columns() {
                items.push((k, py_of(v)?));
            }
            Ok(Field::Py(PyValue::Dict(items)))
        }
        PqField::ListInternal(list) => {
            let items: std::result::Result<Vec<_>, _> =
                list.elements().iter().cloned().map(py_of).collect();
            Ok(Field::Py(PyValue::List(items?)))
        }
        PqField::MapInternal(map) => {
            let mut items = Vec::new();
            for (k, v) in map.entries().iter().cloned() {
                items.push(PyValue::List(vec![py_of(k)?, py_of(v)?]));
            }
            Ok(Field::Py(PyValue::List(items)))
        }
        other => Err(super::error::ValueError::Unconvertible(format!(
            "{other:?}"
        ))),
    }
}

/// A nested Parquet value as a Python value (see [`field_of`]).
fn py_of(v: PqField) -> std::result::Result<PyValue, super::error::ValueError> {
    match field_of(v, false)? {
        Field::Py(p) => Ok(p),
        Field::Raw(_) => Err(super::error::ValueError::Unconvertible(
            "binary inside a list or struct".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::schema::parser::parse_message_type;

    fn encodings(schema: &str) -> Vec<std::result::Result<String, String>> {
        let t = parse_message_type(schema).unwrap();
        t.get_fields()
            .iter()
            .map(|f| encoding_of(f).map(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn schema_types_infer_columns() {
        let got = encodings(
            "message m {
                required binary s (UTF8); optional binary b; required fixed_len_byte_array(4) f;
                required int32 i (INT_8); optional int64 u (UINT_64); required double d;
                required float x; required boolean t;
                optional group l (LIST) { repeated group list { optional int64 element; } }
                optional group st { optional binary n (UTF8); }
            }",
        );
        let ok: Vec<_> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            ok,
            ["str", "bytes", "bytes", "int", "int", "float64", "float64", "json", "json", "json"]
        );
        let refused = encodings(
            "message m {
                required int64 ts (TIMESTAMP_MILLIS); required int32 d (DATE);
                required int96 old; optional group st { optional binary raw; }
            }",
        );
        assert!(refused.iter().all(Result::is_err), "{refused:?}");
        assert!(refused[0].as_ref().unwrap_err().contains("\"ts\""));
    }
}
