//! Bounds-checked little-endian reads: the only way `mds` reads integers out of bytes, so that
//! short input becomes a [`MdsError::Truncated`] naming the offset instead of a panic.

use super::error::{MdsError, Result};

/// Reads the little-endian u32 at `offset`, or reports what was truncated.
pub fn u32_at(bytes: &[u8], offset: usize, what: &'static str) -> Result<u32> {
    let end = offset.checked_add(4);
    match end.and_then(|e| bytes.get(offset..e)) {
        Some(b) => Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(MdsError::Truncated {
            offset: offset as u64,
            what,
            need: 4,
            have: bytes.len().saturating_sub(offset) as u64,
        }),
    }
}

/// The `len` bytes at `offset`, or a truncation error.
pub fn slice_at<'a>(
    bytes: &'a [u8],
    offset: usize,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8]> {
    offset
        .checked_add(len)
        .and_then(|end| bytes.get(offset..end))
        .ok_or(MdsError::Truncated {
            offset: offset as u64,
            what,
            need: len as u64,
            have: bytes.len().saturating_sub(offset) as u64,
        })
}
