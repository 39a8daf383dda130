//! Column encodings: the names `index.json` lists in `column_encodings`, parsed into a closed
//! enum so that every later `match` is checked by the compiler.
//!
//! Parsing follows `streaming/base/format/mds/encodings.py::_get_coder`: the text before the
//! first `:` names the encoding, and only `ndarray` (`ndarray[:dtype[:d0,d1,...]]`) and `jpeg`
//! (`jpeg:quality`) take a configuration. `Display` writes the canonical name back, so an
//! encoding read from an index can be written into a new one unchanged.

use super::error::{MdsError, Result};
use std::fmt;
use std::str::FromStr;

/// A numpy scalar type as MDS stores it: little-endian, fixed width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `uint8`
    U8,
    /// `int8`
    I8,
    /// `uint16`
    U16,
    /// `int16`
    I16,
    /// `float16`
    F16,
    /// `uint32`
    U32,
    /// `int32`
    I32,
    /// `float32`
    F32,
    /// `uint64`
    U64,
    /// `int64`
    I64,
    /// `float64`
    F64,
}

impl Dtype {
    /// Every dtype, in wire-code order.
    pub const ALL: [Dtype; 11] = [
        Dtype::U8,
        Dtype::I8,
        Dtype::U16,
        Dtype::I16,
        Dtype::F16,
        Dtype::U32,
        Dtype::I32,
        Dtype::F32,
        Dtype::U64,
        Dtype::I64,
        Dtype::F64,
    ];

    /// The numpy name (`"uint8"`, `"float32"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "uint8",
            Dtype::I8 => "int8",
            Dtype::U16 => "uint16",
            Dtype::I16 => "int16",
            Dtype::F16 => "float16",
            Dtype::U32 => "uint32",
            Dtype::I32 => "int32",
            Dtype::F32 => "float32",
            Dtype::U64 => "uint64",
            Dtype::I64 => "int64",
            Dtype::F64 => "float64",
        }
    }

    /// Bytes per value.
    pub fn itemsize(self) -> usize {
        match self {
            Dtype::U8 | Dtype::I8 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::F16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::U64 | Dtype::I64 | Dtype::F64 => 8,
        }
    }

    /// The one-byte code a dynamic-dtype `ndarray` column stores (`NDArray._value_dtype2int`).
    pub fn wire_code(self) -> u8 {
        match self {
            Dtype::U8 => 8,
            Dtype::I8 => 9,
            Dtype::U16 => 16,
            Dtype::I16 => 17,
            Dtype::F16 => 18,
            Dtype::U32 => 32,
            Dtype::I32 => 33,
            Dtype::F32 => 34,
            Dtype::U64 => 64,
            Dtype::I64 => 65,
            Dtype::F64 => 66,
        }
    }

    /// The dtype of a wire code, if it is one.
    pub fn from_wire_code(code: u8) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.wire_code() == code)
    }

    /// The dtype of a numpy name, if it is one MDS allows.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The `.npy` `descr` string (`'|u1'`, `'<f4'`, ...).
    pub fn npy_descr(self) -> &'static str {
        match self {
            Dtype::U8 => "|u1",
            Dtype::I8 => "|i1",
            Dtype::U16 => "<u2",
            Dtype::I16 => "<i2",
            Dtype::F16 => "<f2",
            Dtype::U32 => "<u4",
            Dtype::I32 => "<i4",
            Dtype::F32 => "<f4",
            Dtype::U64 => "<u8",
            Dtype::I64 => "<i8",
            Dtype::F64 => "<f8",
        }
    }
}

/// How one column's bytes are encoded (MDS-SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `bytes`: opaque bytes.
    Bytes,
    /// `str`: UTF-8 text.
    Str,
    /// `int`: a Python int stored as i64 little-endian.
    Int,
    /// `uint8` ... `float64`: one numpy scalar.
    Scalar(Dtype),
    /// `str_int`: decimal digits of a Python int (any size).
    StrInt,
    /// `str_float`: Python `str(float)`.
    StrFloat,
    /// `str_decimal`: Python `str(Decimal)`.
    StrDecimal,
    /// `pil`: width, height, mode and raw pixels of a PIL image.
    Pil,
    /// `jpeg` or `jpeg:quality`: a JPEG file.
    Jpeg {
        /// The writer's quality setting, when the encoding names one.
        quality: Option<u8>,
    },
    /// `png`: a PNG file.
    Png,
    /// `pkl`: a Python pickle.
    Pkl,
    /// `json`: UTF-8 of `json.dumps(obj)`.
    Json,
    /// `jpeg_array` (or the older spelling `jpegarray`): a count, sizes, then JPEG files.
    JpegArray {
        /// True for the `jpegarray` spelling.
        legacy_name: bool,
    },
    /// `list[pil]`: a placeholder, a count, sizes, then `pil` encodings.
    ListPil,
    /// `list[jpeg]`: a placeholder, a count, sizes, then JPEG files.
    ListJpeg,
    /// `list[png]`: a placeholder, a count, sizes, then PNG files.
    ListPng,
    /// `ndarray[:dtype[:shape]]`: a numpy array, dtype and shape stored unless fixed here.
    NdArray {
        /// The fixed dtype, or None when each value stores its dtype code.
        dtype: Option<Dtype>,
        /// The fixed shape, or None when each value stores its shape.
        shape: Option<Vec<u64>>,
    },
}

impl Encoding {
    /// The fixed byte size of every value, or None for variable-size encodings.
    /// Matches `get_mds_encoded_size`; None also when a fixed ndarray size overflows u64.
    pub fn fixed_size(&self) -> Option<u64> {
        match self {
            Encoding::Int => Some(8),
            Encoding::Scalar(d) => Some(d.itemsize() as u64),
            Encoding::NdArray {
                dtype: Some(d),
                shape: Some(shape),
            } => shape
                .iter()
                .try_fold(d.itemsize() as u64, |acc, &x| acc.checked_mul(x)),
            _ => None,
        }
    }

    /// The list-of-images encodings, whose values hold several element files.
    pub fn element_encoding(&self) -> Option<Encoding> {
        match self {
            Encoding::JpegArray { .. } | Encoding::ListJpeg => {
                Some(Encoding::Jpeg { quality: None })
            }
            Encoding::ListPng => Some(Encoding::Png),
            Encoding::ListPil => Some(Encoding::Pil),
            _ => None,
        }
    }
}

fn parse_ndarray(text: &str, config: &str) -> Result<Encoding> {
    let bad = || MdsError::UnknownEncoding(text.to_string());
    let parts: Vec<&str> = config.split(':').collect();
    if parts.len() > 2 {
        return Err(bad());
    }
    let dtype = Dtype::from_name(parts[0]).ok_or_else(bad)?;
    let shape = match parts.get(1) {
        None => None,
        Some(s) => {
            let dims = s
                .split(',')
                .map(|d| d.trim().parse::<u64>().ok().filter(|&x| x >= 1))
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(bad)?;
            Some(dims)
        }
    };
    Ok(Encoding::NdArray {
        dtype: Some(dtype),
        shape,
    })
}

impl FromStr for Encoding {
    type Err = MdsError;

    fn from_str(text: &str) -> Result<Encoding> {
        let (name, config) = match text.split_once(':') {
            Some((n, c)) => (n, Some(c)),
            None => (text, None),
        };
        let bad = || MdsError::UnknownEncoding(text.to_string());
        let simple = match name {
            "bytes" => Encoding::Bytes,
            "str" => Encoding::Str,
            "int" => Encoding::Int,
            "str_int" => Encoding::StrInt,
            "str_float" => Encoding::StrFloat,
            "str_decimal" => Encoding::StrDecimal,
            "pil" => Encoding::Pil,
            "png" => Encoding::Png,
            "pkl" => Encoding::Pkl,
            "json" => Encoding::Json,
            "jpeg_array" => Encoding::JpegArray { legacy_name: false },
            "jpegarray" => Encoding::JpegArray { legacy_name: true },
            "list[pil]" => Encoding::ListPil,
            "list[jpeg]" => Encoding::ListJpeg,
            "list[png]" => Encoding::ListPng,
            "jpeg" => match config {
                None => return Ok(Encoding::Jpeg { quality: None }),
                Some(q) => {
                    let q: u8 = q.parse().ok().filter(|&q| q <= 100).ok_or_else(bad)?;
                    return Ok(Encoding::Jpeg { quality: Some(q) });
                }
            },
            "ndarray" => match config {
                // `ndarray:` has an empty config, which upstream treats as no config.
                None | Some("") => {
                    return Ok(Encoding::NdArray {
                        dtype: None,
                        shape: None,
                    })
                }
                Some(c) => return parse_ndarray(text, c),
            },
            other => match Dtype::from_name(other) {
                Some(d) => Encoding::Scalar(d),
                None => return Err(bad()),
            },
        };
        if config.is_some() {
            return Err(bad());
        }
        Ok(simple)
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Encoding::Bytes => f.write_str("bytes"),
            Encoding::Str => f.write_str("str"),
            Encoding::Int => f.write_str("int"),
            Encoding::Scalar(d) => f.write_str(d.name()),
            Encoding::StrInt => f.write_str("str_int"),
            Encoding::StrFloat => f.write_str("str_float"),
            Encoding::StrDecimal => f.write_str("str_decimal"),
            Encoding::Pil => f.write_str("pil"),
            Encoding::Jpeg { quality: None } => f.write_str("jpeg"),
            Encoding::Jpeg { quality: Some(q) } => write!(f, "jpeg:{q}"),
            Encoding::Png => f.write_str("png"),
            Encoding::Pkl => f.write_str("pkl"),
            Encoding::Json => f.write_str("json"),
            Encoding::JpegArray { legacy_name: false } => f.write_str("jpeg_array"),
            Encoding::JpegArray { legacy_name: true } => f.write_str("jpegarray"),
            Encoding::ListPil => f.write_str("list[pil]"),
            Encoding::ListJpeg => f.write_str("list[jpeg]"),
            Encoding::ListPng => f.write_str("list[png]"),
            Encoding::NdArray { dtype, shape } => {
                f.write_str("ndarray")?;
                if let Some(d) = dtype {
                    write!(f, ":{}", d.name())?;
                }
                if let Some(s) = shape {
                    let dims: Vec<String> = s.iter().map(|x| x.to_string()).collect();
                    write!(f, ":{}", dims.join(","))?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "bytes",
            "str",
            "int",
            "uint8",
            "float16",
            "int64",
            "str_int",
            "str_float",
            "str_decimal",
            "pil",
            "jpeg",
            "jpeg:90",
            "png",
            "pkl",
            "json",
            "jpeg_array",
            "jpegarray",
            "list[pil]",
            "list[jpeg]",
            "list[png]",
            "ndarray",
            "ndarray:float32",
            "ndarray:uint8:3,224,224",
        ] {
            let e: Encoding = name.parse().unwrap();
            assert_eq!(e.to_string(), name);
        }
    }

    #[test]
    fn fixed_sizes_match_upstream() {
        let size = |s: &str| s.parse::<Encoding>().unwrap().fixed_size();
        assert_eq!(size("int"), Some(8));
        assert_eq!(size("float16"), Some(2));
        assert_eq!(size("ndarray:uint8:3,224,224"), Some(150528));
        assert_eq!(size("ndarray:float32"), None);
        assert_eq!(size("str"), None);
    }

    #[test]
    fn refuses_unknown_and_malformed() {
        for bad in [
            "",
            "bfloat16",
            "int:3",
            "ndarray:complex64",
            "ndarray:uint8:0",
            "ndarray:uint8:2,x",
            "ndarray:uint8:2:3",
            "ndarray::2",
            "jpeg:101",
            "str:",
        ] {
            assert!(
                matches!(bad.parse::<Encoding>(), Err(MdsError::UnknownEncoding(_))),
                "{bad}"
            );
        }
    }
}
