//! Columns of a pack: the `--columns NAME:ENCODING,…` list, inference of an encoding from the
//! values a reader sees, and turning one value into the bytes MDSWriter stores for it.
//!
//! Every conversion is the one a Python script feeding the same value to `MDSWriter` gets:
//! `str` is the UTF-8 text, `int` is `np.int64(v)`, `float64` is `np.float64(v)`, `json` is
//! `json.dumps(v)`, and bytes (an image file, a tar member) are stored as they are whatever the
//! encoding, as `mds_encode` does. Where Python would quietly do something surprising
//! (`np.int64(2.5)` is 2) the pack stops with an error instead.

use super::error::{OptionError, ValueError};
use super::pyvalue::{dumps, PyValue};
use crate::mds::render::float::{f64_text, f64_to_f16};
use crate::mds::{Dtype, Encoding};

/// One value a reader produced for a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    /// A value parsed from JSON (or a Parquet cell, converted to the same model).
    Py(PyValue),
    /// Bytes as stored in a file (an image, a tar member): stored verbatim.
    Raw(Vec<u8>),
}

/// Parses `--columns`: comma-separated `NAME:ENCODING` pairs (an encoding may itself hold
/// colons, e.g. `ndarray:uint8:3,4` is not supported here; names may not hold `:` or `,`).
pub fn parse_columns(spec: &str) -> Result<Vec<(String, Encoding)>, OptionError> {
    let mut out: Vec<(String, Encoding)> = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, enc) = item
            .split_once(':')
            .ok_or_else(|| OptionError::NotAColumn(item.to_string()))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(OptionError::EmptyColumnName(item.to_string()));
        }
        let enc: Encoding = enc
            .trim()
            .parse()
            .map_err(|error| OptionError::ColumnEncoding {
                item: item.to_string(),
                error,
            })?;
        if out.iter().any(|(n, _)| n == name) {
            return Err(OptionError::ColumnTwice(name.to_string()));
        }
        out.push((name.to_string(), enc));
    }
    if out.is_empty() {
        return Err(OptionError::NoColumn);
    }
    Ok(out)
}

/// The encoding a JSON value suggests: `str`, `int`, `float64`, or `json` for the rest; None
/// for `null` (which says nothing).
pub fn infer(v: &PyValue) -> Option<Encoding> {
    match v {
        PyValue::Null => None,
        PyValue::Str(_) => Some(Encoding::Str),
        PyValue::Int(_) => Some(Encoding::Int),
        PyValue::Float(_) => Some(Encoding::Scalar(Dtype::F64)),
        PyValue::Bool(_) | PyValue::List(_) | PyValue::Dict(_) => Some(Encoding::Json),
    }
}

/// Joins what two values suggest: `int` and `float64` widen to `float64`; any other change is
/// an error (the column's type changes).
pub fn widen(seen: &Encoding, new: &Encoding) -> Option<Encoding> {
    let float = Encoding::Scalar(Dtype::F64);
    match (seen, new) {
        (a, b) if a == b => Some(a.clone()),
        (Encoding::Int, b) | (b, Encoding::Int) if *b == float => Some(float),
        _ => None,
    }
}

fn wrong_type(wanted: &'static str, v: &PyValue) -> ValueError {
    ValueError::WrongType {
        wanted,
        found: v.type_name(),
    }
}

fn number_of(v: &PyValue) -> Result<f64, ValueError> {
    match v {
        // Correctly rounded, as Python's float(int) is.
        PyValue::Int(t) => t.parse::<f64>().map_err(|_| ValueError::TooWide(t.clone())),
        PyValue::Float(x) => Ok(*x),
        PyValue::Bool(b) => Ok(f64::from(u8::from(*b))),
        other => Err(wrong_type("a number", other)),
    }
}

/// `v` as an integer within `[lo, hi]`, the range of `dtype`.
fn integer_of(v: &PyValue, dtype: &'static str, lo: i128, hi: i128) -> Result<i128, ValueError> {
    let x = match v {
        PyValue::Int(t) => t
            .parse::<i128>()
            .map_err(|_| ValueError::TooWide(t.clone()))?,
        PyValue::Bool(b) => i128::from(*b),
        PyValue::Float(x) => return Err(ValueError::FloatForInteger { dtype, value: *x }),
        other => {
            return Err(ValueError::NotAnInteger {
                dtype,
                found: other.type_name(),
            })
        }
    };
    if (lo..=hi).contains(&x) {
        Ok(x)
    } else {
        Err(ValueError::OutOfRange { value: x, dtype })
    }
}

/// Checks that stored bytes are what their column's encoding says: a JPEG or PNG file's
/// signature, UTF-8 for `str` and `json`. Other encodings take any bytes.
pub fn check_stored(enc: &Encoding, bytes: &[u8]) -> Result<(), ValueError> {
    match enc {
        Encoding::Jpeg { .. } if !bytes.starts_with(&[0xff, 0xd8, 0xff]) => {
            Err(ValueError::NotJpeg)
        }
        Encoding::Png if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") => Err(ValueError::NotPng),
        Encoding::Str | Encoding::Json if std::str::from_utf8(bytes).is_err() => {
            Err(ValueError::NotUtf8)
        }
        _ => Ok(()),
    }
}

/// Appends the bytes MDSWriter stores for `field` in a column of encoding `enc`.
pub fn encode(enc: &Encoding, field: &Field, out: &mut Vec<u8>) -> Result<(), ValueError> {
    match field {
        Field::Raw(bytes) => {
            out.extend_from_slice(bytes);
            Ok(())
        }
        Field::Py(v) => encode_py(enc, v, out),
    }
}

/// Appends the bytes MDSWriter stores for the Python value `v` in a column of encoding `enc`.
pub fn encode_py(enc: &Encoding, v: &PyValue, out: &mut Vec<u8>) -> Result<(), ValueError> {
    match enc {
        Encoding::Str | Encoding::Bytes => match v {
            PyValue::Str(s) => out.extend_from_slice(s.as_bytes()),
            other => return Err(wrong_type("a string", other)),
        },
        Encoding::Json => {
            let mut s = String::new();
            dumps(v, &mut s);
            out.extend_from_slice(s.as_bytes());
        }
        Encoding::Int => {
            let x = integer_of(v, "int", i64::MIN.into(), i64::MAX.into())?;
            out.extend_from_slice(&(x as i64).to_le_bytes());
        }
        Encoding::StrInt => match v {
            PyValue::Int(t) => out.extend_from_slice(t.as_bytes()),
            other => return Err(wrong_type("an integer", other)),
        },
        Encoding::StrFloat => match v {
            PyValue::Float(x) => out.extend_from_slice(f64_text(*x).as_bytes()),
            other => return Err(wrong_type("a float", other)),
        },
        Encoding::Scalar(d) => match d {
            Dtype::F64 => out.extend_from_slice(&number_of(v)?.to_le_bytes()),
            Dtype::F32 => out.extend_from_slice(&(number_of(v)? as f32).to_le_bytes()),
            Dtype::F16 => out.extend_from_slice(&f64_to_f16(number_of(v)?).to_le_bytes()),
            _ => {
                let bytes = d.itemsize();
                let (lo, hi): (i128, i128) = match d {
                    Dtype::U8 | Dtype::U16 | Dtype::U32 | Dtype::U64 => {
                        (0, (1i128 << (8 * bytes)) - 1)
                    }
                    _ => (-(1i128 << (8 * bytes - 1)), (1i128 << (8 * bytes - 1)) - 1),
                };
                let x = integer_of(v, d.name(), lo, hi)?;
                out.extend_from_slice(&x.to_le_bytes()[..bytes]);
            }
        },
        other => {
            return Err(ValueError::Unsupported {
                found: v.type_name(),
                encoding: other.clone(),
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(e: &str, v: &str) -> Result<Vec<u8>, ValueError> {
        let mut out = Vec::new();
        let v = super::super::pyvalue::loads(v.as_bytes()).unwrap();
        encode(&e.parse().unwrap(), &Field::Py(v), &mut out).map(|()| out)
    }

    #[test]
    fn numbers_as_numpy_stores_them() {
        assert_eq!(enc("int", "-2").unwrap(), (-2i64).to_le_bytes());
        assert_eq!(enc("float64", "3").unwrap(), 3f64.to_le_bytes());
        assert_eq!(enc("uint8", "255").unwrap(), [255]);
        assert!(enc("uint8", "256").is_err());
        assert!(enc("int", "2.5").is_err());
        assert!(enc("int", "9223372036854775808").is_err());
        assert_eq!(
            enc("json", r#"{"a": [1, 2.50]}"#).unwrap(),
            br#"{"a": [1, 2.5]}"#
        );
    }

    #[test]
    fn column_lists() {
        let c = parse_columns("text:str, n:int").unwrap();
        assert_eq!(c[1], ("n".to_string(), Encoding::Int));
        assert!(parse_columns("a:int,a:str").is_err());
        assert!(parse_columns("a").is_err());
        assert!(parse_columns("a:nope").is_err());
    }
}
