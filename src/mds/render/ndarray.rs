//! Reading an `ndarray` value (MDS-SPEC §3, `NDArray.decode`): `[dtype code u8]` unless the
//! encoding fixes the dtype, `[(ndim << 2) | w, then ndim dims of u8/u16/u32/u64]` unless it
//! fixes the shape, then the C-order values, which must fill the shape exactly.

use crate::mds::encoding::Dtype;
use crate::mds::error::{MdsError, Result};

/// An array value: dtype, shape and its C-order data bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NdValue<'a> {
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Little-endian C-order values, exactly prod(shape)·itemsize bytes.
    pub data: &'a [u8],
}

fn err(msg: String) -> MdsError {
    MdsError::Render {
        encoding: "ndarray".into(),
        msg,
    }
}

/// Parses one ndarray value given the encoding's fixed dtype and shape, if any.
pub fn parse<'a>(
    dtype: Option<Dtype>,
    shape: Option<&[u64]>,
    raw: &'a [u8],
) -> Result<NdValue<'a>> {
    let mut pos = 0usize;
    let dtype = match dtype {
        Some(d) => d,
        None => {
            let code = *raw
                .first()
                .ok_or_else(|| err("offset 0: missing dtype code".into()))?;
            pos = 1;
            Dtype::from_wire_code(code)
                .ok_or_else(|| err(format!("offset 0: unknown dtype code {code}")))?
        }
    };
    let shape = match shape {
        Some(s) => s.to_vec(),
        None => {
            let byte = *raw
                .get(pos)
                .ok_or_else(|| err(format!("offset {pos}: missing shape byte")))?;
            pos += 1;
            let ndim = usize::from(byte >> 2);
            let width = 1usize << (byte & 3);
            let dims = raw
                .get(pos..pos + ndim * width)
                .ok_or_else(|| err(format!("offset {pos}: truncated shape of {ndim} dims")))?;
            pos += ndim * width;
            dims.chunks_exact(width)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..width].copy_from_slice(c);
                    u64::from_le_bytes(b)
                })
                .collect()
        }
    };
    let count = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| n.checked_mul(dtype.itemsize() as u64))
        .ok_or_else(|| err(format!("shape {shape:?} overflows")))?;
    let data = &raw[pos..];
    if data.len() as u64 != count {
        return Err(err(format!(
            "offset {pos}: {} {} values of shape {shape:?} need {count} bytes, found {}",
            count / dtype.itemsize() as u64,
            dtype.name(),
            data.len()
        )));
    }
    Ok(NdValue { dtype, shape, data })
}
