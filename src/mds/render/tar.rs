//! A minimal POSIX ustar writer for the list-of-images encodings: each element becomes one
//! member (`0000.jpg`, `0001.jpg`, ...), so `tar -x` or Python's `tarfile` unpacks the files a
//! standard decoder reads. Deterministic: mode 0644, uid/gid 0, mtime 0, no user names.
//! Layout: per member a 512-byte header then the data padded to 512, then two zero blocks.

const BLOCK: u64 = 512;

/// Size of a tar holding members of these lengths.
pub fn tar_len(member_lens: impl IntoIterator<Item = u64>) -> u64 {
    member_lens
        .into_iter()
        .map(|len| BLOCK + len.div_ceil(BLOCK) * BLOCK)
        .sum::<u64>()
        + 2 * BLOCK
}

fn octal(field: &mut [u8], value: u64) {
    // Zero-padded octal digits, then a NUL.
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    let text = text.as_bytes();
    let text = &text[text.len().saturating_sub(digits)..];
    field[..digits].copy_from_slice(text);
    field[digits] = 0;
}

/// A tar header's checksum: the sum of its bytes with the checksum field (bytes 148..156)
/// read as spaces (POSIX `ustar`).
pub fn checksum(header: &[u8; BLOCK as usize]) -> u64 {
    let field = 148..156;
    header
        .iter()
        .enumerate()
        .map(|(i, &b)| if field.contains(&i) { 32 } else { u64::from(b) })
        .sum()
}

/// Appends one member header for `name` (at most 100 bytes) holding `len` bytes.
fn header(out: &mut Vec<u8>, name: &str, len: u64) {
    let mut h = [0u8; BLOCK as usize];
    let n = name.as_bytes();
    let n = &n[..n.len().min(100)];
    h[..n.len()].copy_from_slice(n);
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], len);
    octal(&mut h[136..148], 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let text = format!("{:06o}\0 ", checksum(&h));
    h[148..156].copy_from_slice(text.as_bytes());
    out.extend_from_slice(&h);
}

/// Writes a tar of `(name, bytes)` members.
pub fn write_tar<'a>(
    members: impl IntoIterator<Item = (String, std::borrow::Cow<'a, [u8]>)>,
) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in members {
        header(&mut out, &name, data.len() as u64);
        out.extend_from_slice(&data);
        let pad = (BLOCK - data.len() as u64 % BLOCK) % BLOCK;
        out.resize(out.len() + pad as usize, 0);
    }
    out.resize(out.len() + 2 * BLOCK as usize, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn layout_and_length() {
        let t = write_tar([
            ("0000.jpg".to_string(), Cow::Borrowed(&b"abc"[..])),
            ("0001.jpg".to_string(), Cow::Borrowed(&[7u8; 512][..])),
        ]);
        assert_eq!(t.len() as u64, tar_len([3, 512]));
        assert_eq!(t.len(), 512 * 2 + 512 + 512 + 1024);
        assert_eq!(&t[..8], b"0000.jpg");
        assert_eq!(&t[124..136], b"00000000003\0");
        assert_eq!(&t[512..515], b"abc");
        // The header's bytes around the checksum field, plus that field as 8 spaces.
        let sum: u32 = t[..148]
            .iter()
            .chain(&t[156..512])
            .map(|&b| u32::from(b))
            .sum::<u32>()
            + 8 * 32;
        let stored = u32::from_str_radix(std::str::from_utf8(&t[148..154]).unwrap(), 8).unwrap();
        assert_eq!(sum, stored);
        assert_eq!(write_tar(std::iter::empty()).len(), 1024);
    }
}
