//! Column files: the bytes a reader of the mount sees for one column of one sample, as a pure
//! function of the encoding and the stored bytes (DESIGN.md §3, docs/SEMANTICS.md).
//!
//! [`extension`] is the one table of file extensions. [`render`] returns the stored bytes
//! unchanged where they already are a standard file (jpeg, png, pkl, bytes, text, json) and
//! builds a new one otherwise: decimal text for numeric scalars, `.npy` for `ndarray` and `pil`,
//! a ustar `.tar` of element files for the list-of-images encodings. [`rendered_len`] gives
//! the exact size without building the bytes, so `stat` can answer before any read; both
//! functions accept and refuse exactly the same inputs.

pub mod float;
pub mod ndarray;
pub mod npy;
pub mod pil;
pub mod tar;

use super::encoding::{Dtype, Encoding};
use super::error::{MdsError, Result};
use super::le::{slice_at, u32_at};
use std::borrow::Cow;

use bytes::Bytes;

/// The file extension (without dot) of a column's files: the one table of extensions.
pub fn extension(enc: &Encoding) -> &'static str {
    match enc {
        Encoding::Bytes => "bin",
        Encoding::Str
        | Encoding::StrInt
        | Encoding::StrFloat
        | Encoding::StrDecimal
        | Encoding::Int
        | Encoding::Scalar(_) => "txt",
        Encoding::Json => "json",
        Encoding::Pkl => "pkl",
        Encoding::Jpeg { .. } => "jpg",
        Encoding::Png => "png",
        Encoding::Pil | Encoding::NdArray { .. } => "npy",
        Encoding::JpegArray { .. } | Encoding::ListJpeg | Encoding::ListPng | Encoding::ListPil => {
            "tar"
        }
    }
}

fn render_err(enc: &Encoding, msg: impl Into<String>) -> MdsError {
    MdsError::Render {
        encoding: enc.to_string(),
        msg: msg.into(),
    }
}

fn utf8<'a>(enc: &Encoding, raw: &'a [u8]) -> Result<&'a [u8]> {
    match std::str::from_utf8(raw) {
        Ok(_) => Ok(raw),
        Err(e) => Err(render_err(
            enc,
            format!("offset {}: invalid UTF-8", e.valid_up_to()),
        )),
    }
}

/// Decimal text of one numeric scalar of type `d` stored in `raw`.
pub fn scalar_text(d: Dtype, raw: &[u8]) -> Result<String> {
    let arr = |n: usize| -> Result<[u8; 8]> {
        if raw.len() != n {
            return Err(MdsError::Render {
                encoding: d.name().into(),
                msg: format!("expected {n} bytes, found {}", raw.len()),
            });
        }
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(raw);
        Ok(b)
    };
    let b = arr(d.itemsize())?;
    Ok(match d {
        Dtype::U8 => b[0].to_string(),
        Dtype::I8 => (b[0] as i8).to_string(),
        Dtype::U16 => u16::from_le_bytes([b[0], b[1]]).to_string(),
        Dtype::I16 => i16::from_le_bytes([b[0], b[1]]).to_string(),
        Dtype::F16 => float::f16_text(u16::from_le_bytes([b[0], b[1]])),
        Dtype::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]).to_string(),
        Dtype::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]).to_string(),
        Dtype::F32 => float::f32_text(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        Dtype::U64 => u64::from_le_bytes(b).to_string(),
        Dtype::I64 => i64::from_le_bytes(b).to_string(),
        Dtype::F64 => float::f64_text(f64::from_le_bytes(b)),
    })
}

/// Splits a list-of-images value into its element byte strings.
/// `jpeg_array`: u32 n, u32 sizes\[n\], blobs. `list[*]`: u32 placeholder, then the same.
pub fn list_elements<'a>(enc: &Encoding, raw: &'a [u8]) -> Result<Vec<&'a [u8]>> {
    let wrap = |e: MdsError| render_err(enc, e.to_string());
    let start = match enc {
        Encoding::JpegArray { .. } => 0,
        _ => 4,
    };
    let n = u32_at(raw, start, "element count").map_err(wrap)? as usize;
    let sizes_at = start + 4;
    let sizes = slice_at(raw, sizes_at, n.saturating_mul(4), "element sizes").map_err(wrap)?;
    let mut pos = sizes_at + 4 * n;
    let mut out = Vec::with_capacity(n);
    for (k, s) in sizes.chunks_exact(4).enumerate() {
        let len = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize;
        let elem = slice_at(raw, pos, len, "element")
            .map_err(|e| render_err(enc, format!("element {k}: {e}")))?;
        out.push(elem);
        pos += len;
    }
    if pos != raw.len() {
        return Err(render_err(
            enc,
            format!(
                "offset {pos}: {} trailing bytes after the last element",
                raw.len() - pos
            ),
        ));
    }
    Ok(out)
}

fn member_name(k: usize, ext: &str) -> String {
    format!("{k:04}.{ext}")
}

/// The bytes of the column file for a value stored as `raw` under encoding `enc`.
pub fn render<'a>(enc: &Encoding, raw: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    Ok(match enc {
        Encoding::Bytes | Encoding::Jpeg { .. } | Encoding::Png | Encoding::Pkl => {
            Cow::Borrowed(raw)
        }
        Encoding::Str
        | Encoding::StrInt
        | Encoding::StrFloat
        | Encoding::StrDecimal
        | Encoding::Json => Cow::Borrowed(utf8(enc, raw)?),
        Encoding::Int => Cow::Owned(scalar_text(Dtype::I64, raw)?.into_bytes()),
        Encoding::Scalar(d) => Cow::Owned(scalar_text(*d, raw)?.into_bytes()),
        Encoding::NdArray { dtype, shape } => {
            let v = ndarray::parse(*dtype, shape.as_deref(), raw)?;
            let mut out = npy::header(v.dtype.npy_descr(), &v.shape)
                .ok_or_else(|| render_err(enc, "too many dimensions for .npy"))?;
            out.extend_from_slice(v.data);
            Cow::Owned(out)
        }
        Encoding::Pil => {
            let v = pil::parse(raw)?;
            let mut out = npy::header(v.descr(), &v.shape())
                .ok_or_else(|| render_err(enc, "bad .npy header"))?;
            out.reserve(v.data_len() as usize);
            v.write_data(&mut out);
            Cow::Owned(out)
        }
        Encoding::JpegArray { .. } | Encoding::ListJpeg | Encoding::ListPng | Encoding::ListPil => {
            let elem_enc = enc
                .element_encoding()
                .ok_or_else(|| render_err(enc, "not a list encoding"))?;
            let ext = extension(&elem_enc);
            let mut members = Vec::new();
            for (k, e) in list_elements(enc, raw)?.into_iter().enumerate() {
                let bytes = render(&elem_enc, e)
                    .map_err(|err| render_err(enc, format!("element {k}: {err}")))?;
                members.push((member_name(k, ext), bytes));
            }
            Cow::Owned(tar::write_tar(members))
        }
    })
}

/// Bytes `offset..offset + len` of [`render`]'s output (clamped to its end), built without
/// copying where the file is stored as is: a view of `raw` for bytes, strings, images and the
/// data part of an `.npy`; only the `.npy` header, numbers and archives are built.
pub fn render_range(enc: &Encoding, raw: &Bytes, offset: u64, len: usize) -> Result<Bytes> {
    let window = |total: usize| {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(total);
        start..start.saturating_add(len).min(total)
    };
    match enc {
        Encoding::Bytes | Encoding::Jpeg { .. } | Encoding::Png | Encoding::Pkl => {
            Ok(raw.slice(window(raw.len())))
        }
        Encoding::Str
        | Encoding::StrInt
        | Encoding::StrFloat
        | Encoding::StrDecimal
        | Encoding::Json => {
            utf8(enc, raw)?;
            Ok(raw.slice(window(raw.len())))
        }
        Encoding::NdArray { dtype, shape } => {
            let v = ndarray::parse(*dtype, shape.as_deref(), raw)?;
            let header = npy::header(v.dtype.npy_descr(), &v.shape)
                .ok_or_else(|| render_err(enc, "too many dimensions for .npy"))?;
            let data = raw.slice_ref(v.data);
            let w = window(header.len() + data.len());
            if w.start >= header.len() {
                return Ok(data.slice(w.start - header.len()..w.end - header.len()));
            }
            let mut out = Vec::with_capacity(w.len());
            out.extend_from_slice(&header[w.start..w.end.min(header.len())]);
            if w.end > header.len() {
                out.extend_from_slice(&data[..w.end - header.len()]);
            }
            Ok(Bytes::from(out))
        }
        _ => {
            let file = render(enc, raw)?.into_owned();
            let w = window(file.len());
            Ok(Bytes::from(file).slice(w))
        }
    }
}

/// Whether a column's file is its stored bytes unchanged (`bytes`, `jpeg`, `png`, `pkl`), so
/// its length is the stored length; for the others it depends on the bytes (text of a number,
/// .npy headers, UTF-8 checks).
pub fn renders_as_stored(enc: &Encoding) -> bool {
    matches!(
        enc,
        Encoding::Bytes | Encoding::Jpeg { .. } | Encoding::Png | Encoding::Pkl
    )
}

/// The exact length of [`render`]'s output, computed without building it.
pub fn rendered_len(enc: &Encoding, raw: &[u8]) -> Result<u64> {
    Ok(match enc {
        Encoding::Int | Encoding::Scalar(_) => render(enc, raw)?.len() as u64,
        Encoding::NdArray { dtype, shape } => {
            let v = ndarray::parse(*dtype, shape.as_deref(), raw)?;
            npy::header_len(v.dtype.npy_descr(), &v.shape) as u64 + v.data.len() as u64
        }
        Encoding::Pil => {
            let v = pil::parse(raw)?;
            npy::header_len(v.descr(), &v.shape()) as u64 + v.data_len()
        }
        Encoding::JpegArray { .. } | Encoding::ListJpeg | Encoding::ListPng | Encoding::ListPil => {
            let elem_enc = enc
                .element_encoding()
                .ok_or_else(|| render_err(enc, "not a list encoding"))?;
            let mut lens = Vec::new();
            for (k, e) in list_elements(enc, raw)?.into_iter().enumerate() {
                let len = rendered_len(&elem_enc, e)
                    .map_err(|err| render_err(enc, format!("element {k}: {err}")))?;
                lens.push(len);
            }
            tar::tar_len(lens)
        }
        _ => render(enc, raw)?.len() as u64,
    })
}
