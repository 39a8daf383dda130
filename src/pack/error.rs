//! The one error type of `pack`: every failure names the file (and the line or tar member)
//! it comes from, so a user can fix the input and run the pack again.

use super::pyvalue::{float_repr, JsonError};
use crate::mds::Encoding;
use thiserror::Error;

/// Everything that can stop a pack.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PackError {
    /// Bad input data: `where_` is `path`, `path:line` or `path (member NAME)`.
    #[error("{where_}: {what}")]
    Input {
        /// The file and the line or member.
        where_: String,
        /// What is wrong there (boxed: it is large, and rare).
        what: Box<InputError>,
    },
    /// A file or folder that cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Options that do not fit together or do not fit the input.
    #[error("{0}")]
    Options(String),
    /// An option text that does not parse.
    #[error(transparent)]
    Option(#[from] OptionError),
    /// The destination is not in a state a pack may write to.
    #[error("{0}")]
    Dest(String),
    /// The MDS writer refused a sample or a setting.
    #[error(transparent)]
    Mds(#[from] crate::mds::MdsError),
    /// The object store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A thread of the pack stopped without saying why (a bug: the pack stops).
    #[error("{0}")]
    Internal(String),
}

/// What is wrong at one place of the input (the file, line or member is in
/// [`PackError::Input`]).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InputError {
    /// A file name that is not UTF-8.
    #[error("the name is not UTF-8")]
    NameNotUtf8,
    /// An ImageFolder class folder without images.
    #[error("class folder holds no image file")]
    EmptyClass,
    /// A JSON Lines line that is not JSON.
    #[error("not JSON: {0}")]
    NotJson(JsonError),
    /// A JSON Lines line that is JSON but not an object.
    #[error("expected a JSON object, found {0}")]
    NotAnObject(&'static str),
    /// A field whose type differs from the one an earlier line gave it.
    #[error(
        "field {field:?} is {found} here but {before} at {at}; give its encoding with \
         --columns (json keeps any value)"
    )]
    FieldChangesType {
        /// The field.
        field: String,
        /// Its Python type here.
        found: &'static str,
        /// The encoding the earlier line suggested.
        before: Encoding,
        /// Where that line is (`path:line`).
        at: String,
    },
    /// An object without one of the columns.
    #[error("the object has no field {0:?}")]
    MissingField(String),
    /// A field that cannot be stored with its column's encoding.
    #[error("field {field:?} ({encoding}): {error}")]
    Field {
        /// The field.
        field: String,
        /// Its column's encoding.
        encoding: Encoding,
        /// Why.
        error: ValueError,
    },
    /// A field the lines the columns were inferred from did not have.
    #[error(
        "field {0:?} first appears here, after the lines the columns were inferred from; give \
         the columns with --columns"
    )]
    LateField(String),
    /// A column value (ImageFolder) that cannot be stored with its encoding.
    #[error("column {column:?}: {error}")]
    Column {
        /// The column.
        column: String,
        /// Why.
        error: ValueError,
    },
    /// A value that cannot be stored, where the place says which one it is.
    #[error("{0}")]
    Value(ValueError),
    /// A Parquet file that cannot be read (or a schema pack does not convert).
    #[error("Parquet: {0}")]
    Parquet(String),
    /// A tar file that ends early.
    #[error(
        "the tar ends in the middle of {} (offset {offset})",
        if *.in_member { "this member" } else { "a header" }
    )]
    TarCut {
        /// In a member's data (else in a header).
        in_member: bool,
        /// The offset in the tar where it ends.
        offset: u64,
    },
    /// A tar member larger than memory can address.
    #[error("member too large")]
    MemberTooLarge,
    /// A tar header that does not parse.
    #[error("offset {offset}: {fault}")]
    TarHeader {
        /// The header's offset in the tar.
        offset: u64,
        /// What is wrong with it.
        fault: TarFault,
    },
    /// Two members with the same extension in one sample.
    #[error("a second .{ext} member for the sample {key:?}")]
    SecondMember {
        /// The sample key.
        key: String,
        /// The extension.
        ext: String,
    },
    /// A sample without one of the columns.
    #[error("the sample {key:?} has no .{ext} member")]
    MissingMember {
        /// The sample key.
        key: String,
        /// The column (extension).
        ext: String,
    },
    /// A member that cannot be stored with its column's encoding.
    #[error("{key}.{ext}: {error}")]
    Member {
        /// The sample key.
        key: String,
        /// The column (extension).
        ext: String,
        /// Why.
        error: ValueError,
    },
    /// A member the samples the columns were inferred from did not have.
    #[error(
        "the sample {key:?} has a .{ext} member, which the samples the columns were inferred \
         from did not have; give the columns with --columns"
    )]
    LateMember {
        /// The sample key.
        key: String,
        /// The extension.
        ext: String,
    },
}

/// What is wrong with a tar header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TarFault {
    /// The header's checksum does not match its bytes.
    #[error("not a tar header (checksum mismatch)")]
    Checksum,
    /// The size field is not an octal number.
    #[error("bad size field")]
    Size,
}

/// Why a pack option text (`--columns`, `--format`, `--part`) is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OptionError {
    /// A `--columns` item without a `:`.
    #[error("--columns: {0:?} is not NAME:ENCODING")]
    NotAColumn(String),
    /// A `--columns` item with no name before the `:`.
    #[error("--columns: {0:?} has an empty name")]
    EmptyColumnName(String),
    /// A `--columns` item whose encoding MDS does not know.
    #[error("--columns: {item:?}: {error}")]
    ColumnEncoding {
        /// The item.
        item: String,
        /// Why the encoding is refused.
        error: crate::mds::MdsError,
    },
    /// A column named twice.
    #[error("--columns: column {0:?} is given twice")]
    ColumnTwice(String),
    /// An empty `--columns`.
    #[error("--columns: no column given")]
    NoColumn,
    /// A `--format` that is none of the formats.
    #[error("unknown format {0:?} (imagefolder, jsonl, parquet, webdataset)")]
    Format(String),
    /// A `--part` that is not `K/N`.
    #[error("--part {0:?}: expected K/N with 0 <= K < N, e.g. 0/4")]
    Part(String),
}

impl PackError {
    /// Bad input at `where_`.
    pub fn input(where_: impl Into<String>, what: InputError) -> PackError {
        PackError::Input {
            where_: where_.into(),
            what: Box::new(what),
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> PackError {
        PackError::Io {
            path: path.to_string(),
            source,
        }
    }
}

/// Results of `pack`.
pub type Result<T, E = PackError> = std::result::Result<T, E>;

/// Why a value cannot be stored in its column (the pack names the column and the place).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// A value of the wrong Python type.
    #[error("expected {wanted}, found {found}")]
    WrongType {
        /// What the encoding takes: `a string`, `an integer`, `a float`, `a number`.
        wanted: &'static str,
        /// The Python type found.
        found: &'static str,
    },
    /// A non-integer for an integer encoding.
    #[error("expected an integer for {dtype}, found {found}")]
    NotAnInteger {
        /// The encoding's numpy dtype (`int` for MDS's `int`).
        dtype: &'static str,
        /// The Python type found.
        found: &'static str,
    },
    /// A float for an integer encoding (numpy would truncate it).
    #[error("expected an integer for {dtype}, found the float {}", float_repr(*.value))]
    FloatForInteger {
        /// The encoding's numpy dtype.
        dtype: &'static str,
        /// The float found.
        value: f64,
    },
    /// An integer wider than any encoding holds.
    #[error("integer {0} does not fit in 64 bits")]
    TooWide(String),
    /// An integer outside its dtype's range.
    #[error("{value} is out of range for {dtype}")]
    OutOfRange {
        /// The integer.
        value: i128,
        /// The encoding's numpy dtype.
        dtype: &'static str,
    },
    /// An encoding a pack cannot produce from a Python value.
    #[error(
        "a {found} value cannot be stored as {encoding}; choose str, int, float64, json or \
         bytes with --columns"
    )]
    Unsupported {
        /// The Python type of the value.
        found: &'static str,
        /// The column's encoding.
        encoding: Encoding,
    },
    /// A Parquet value of a kind no column encoding takes.
    #[error("a Parquet value pack does not convert: {0}")]
    Unconvertible(String),
    /// Bytes for a `jpeg` column that are not a JPEG file.
    #[error("not a JPEG file (it does not start with FF D8 FF)")]
    NotJpeg,
    /// Bytes for a `png` column that are not a PNG file.
    #[error("not a PNG file (no PNG signature)")]
    NotPng,
    /// Bytes for a `str` or `json` column that are not UTF-8 text.
    #[error("not UTF-8 text")]
    NotUtf8,
}
