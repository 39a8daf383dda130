//! The `.npy` header, byte for byte as `numpy.save` writes it (numpy `lib/format.py`,
//! `_write_array_header` + `_wrap_header`, format version 1.0):
//! `\x93NUMPY\x01\x00`, a u16 header length, then the dict text
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`, 21 − len(str(shape\[0\])) spare
//! spaces (numpy's room to grow the first axis in place), then spaces up to a 64-byte boundary
//! and a final newline. The C-order data follows the header unchanged.

/// numpy's `ARRAY_ALIGN`.
const ALIGN: usize = 64;
/// numpy's `GROWTH_AXIS_MAX_DIGITS`.
const GROWTH_DIGITS: usize = 21;
/// Magic string, version bytes and the u16 length.
const PREFIX: usize = 10;

/// The dict text before padding.
fn dict(descr: &str, shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    if let Some(first) = dims.first() {
        h.push_str(&" ".repeat(GROWTH_DIGITS.saturating_sub(first.len())));
    }
    h
}

/// Length of the whole header for this dtype and shape.
pub fn header_len(descr: &str, shape: &[u64]) -> usize {
    let hlen = dict(descr, shape).len() + 1;
    // numpy pads by ALIGN − (x mod ALIGN): a full extra block when already aligned.
    let pad = ALIGN - (PREFIX + hlen) % ALIGN;
    PREFIX + hlen + pad
}

/// The header bytes; the caller appends the data. None when the header would exceed the
/// 65535 bytes of format 1.0 (possible only for an index that declares thousands of axes).
pub fn header(descr: &str, shape: &[u64]) -> Option<Vec<u8>> {
    let d = dict(descr, shape);
    let total = header_len(descr, shape);
    let body = u16::try_from(total - PREFIX).ok()?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&body.to_le_bytes());
    out.extend_from_slice(d.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numpy_save() {
        // np.save of np.zeros((2, 3), np.uint8), header part (numpy 2.x).
        let h = header("|u1", &[2, 3]).unwrap();
        assert_eq!(h.len(), 128);
        assert_eq!(&h[..10], b"\x93NUMPY\x01\x00v\x00");
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }"));
        assert!(text.ends_with(" \n"));
        assert_eq!(header_len("<f4", &[4]), 128);
        assert!(header("<f4", &[4]).unwrap()[10..]
            .starts_with(b"{'descr': '<f4', 'fortran_order': False, 'shape':"));
        assert!(std::str::from_utf8(&header("<f8", &[]).unwrap()[10..])
            .unwrap()
            .contains("'shape': (), }"));
    }
}
