//! Reading a `pil` value (MDS-SPEC §3, `PIL.encode`): u32 width, u32 height, u32 mode length,
//! the mode name, then `Image.tobytes()`, and mapping it to a numpy array of shape
//! (height, width, channels), which shardfs writes as `.npy`.
//!
//! Pillow's raw layout per mode: 8-bit bands for `L`, `P`, `LA`, `RGB`, `RGBA`, `CMYK`, ...;
//! `I` is int32, `F` float32, `I;16`/`I;16L` little-endian uint16, `I;16B` big-endian; `1` packs
//! 8 pixels per byte, MSB first, rows padded to whole bytes, and is unpacked to booleans here.
//! `P` images lose their palette in MDS (it is not stored), so they render as palette indices.
//! A mode not in the table renders as uint8 with channels = pixel bytes / (width·height).

use crate::mds::error::{MdsError, Result};
use crate::mds::le::u32_at;

/// Pixel element type of a rendered image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PixelType {
    /// One bit per pixel, unpacked to one byte 0/1 (`|b1`).
    Bit,
    /// A `.npy` descr for the stored bytes, used as they are.
    Plain(&'static str, usize),
}

/// A decoded `pil` header and its pixel bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PilValue<'a> {
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Pillow mode name.
    pub mode: &'a str,
    /// Raw `tobytes()` pixels.
    pub pixels: &'a [u8],
    /// Element type of the rendered array.
    pub pixel_type: PixelType,
    /// Channels (last axis of the rendered array).
    pub channels: u64,
}

fn err(msg: String) -> MdsError {
    MdsError::Render {
        encoding: "pil".into(),
        msg,
    }
}

fn mode_layout(mode: &str) -> Option<(PixelType, u64)> {
    let u8s = |c| Some((PixelType::Plain("|u1", 1), c));
    match mode {
        "1" => Some((PixelType::Bit, 1)),
        "L" | "P" => u8s(1),
        "LA" | "La" | "PA" => u8s(2),
        "RGB" | "YCbCr" | "LAB" | "HSV" => u8s(3),
        "RGBA" | "RGBa" | "RGBX" | "CMYK" => u8s(4),
        "I" => Some((PixelType::Plain("<i4", 4), 1)),
        "F" => Some((PixelType::Plain("<f4", 4), 1)),
        "I;16" | "I;16L" | "I;16N" => Some((PixelType::Plain("<u2", 2), 1)),
        "I;16B" => Some((PixelType::Plain(">u2", 2), 1)),
        _ => None,
    }
}

/// Parses a `pil` value and checks the pixel bytes fit its size and mode.
pub fn parse(raw: &[u8]) -> Result<PilValue<'_>> {
    let wrap = |e: MdsError| err(e.to_string());
    let width = u32_at(raw, 0, "pil width").map_err(wrap)?;
    let height = u32_at(raw, 4, "pil height").map_err(wrap)?;
    let mode_len = u32_at(raw, 8, "pil mode length").map_err(wrap)? as usize;
    let mode_bytes = raw
        .get(12..12usize.saturating_add(mode_len))
        .ok_or_else(|| {
            err(format!(
                "offset 12: truncated mode name of {mode_len} bytes"
            ))
        })?;
    let mode = std::str::from_utf8(mode_bytes)
        .map_err(|_| err("offset 12: mode name is not UTF-8".into()))?;
    let pixels = &raw[12 + mode_len..];
    let area = u64::from(width) * u64::from(height);
    let (pixel_type, channels) = match mode_layout(mode) {
        Some(l) => l,
        None if area == 0 => (PixelType::Plain("|u1", 1), 1),
        None if pixels.len() as u64 % area == 0 && !pixels.is_empty() => {
            (PixelType::Plain("|u1", 1), pixels.len() as u64 / area)
        }
        None => {
            return Err(err(format!(
                "unknown mode {mode:?} with {} pixel bytes for {width}x{height}",
                pixels.len()
            )))
        }
    };
    let need = match pixel_type {
        PixelType::Bit => u64::from(width).div_ceil(8) * u64::from(height),
        PixelType::Plain(_, size) => area
            .checked_mul(channels)
            .and_then(|v| v.checked_mul(size as u64))
            .ok_or_else(|| {
                err(format!(
                    "mode {mode:?} {width}x{height}: pixel count overflows"
                ))
            })?,
    };
    if pixels.len() as u64 != need {
        return Err(err(format!(
            "offset {}: mode {mode:?} {width}x{height} needs {need} pixel bytes, found {}",
            12 + mode_len,
            pixels.len()
        )));
    }
    Ok(PilValue {
        width,
        height,
        mode,
        pixels,
        pixel_type,
        channels,
    })
}

impl PilValue<'_> {
    /// The `.npy` descr of the rendered array.
    pub fn descr(&self) -> &'static str {
        match self.pixel_type {
            PixelType::Bit => "|b1",
            PixelType::Plain(d, _) => d,
        }
    }

    /// Shape of the rendered array: (height, width, channels).
    pub fn shape(&self) -> [u64; 3] {
        [u64::from(self.height), u64::from(self.width), self.channels]
    }

    /// Bytes of the rendered array data.
    pub fn data_len(&self) -> u64 {
        match self.pixel_type {
            PixelType::Bit => u64::from(self.width) * u64::from(self.height),
            PixelType::Plain(..) => self.pixels.len() as u64,
        }
    }

    /// Appends the rendered array data to `out`.
    pub fn write_data(&self, out: &mut Vec<u8>) {
        match self.pixel_type {
            PixelType::Plain(..) => out.extend_from_slice(self.pixels),
            PixelType::Bit => {
                let row_bytes = (self.width as usize).div_ceil(8);
                if row_bytes == 0 {
                    return;
                }
                for row in self.pixels.chunks_exact(row_bytes) {
                    for x in 0..self.width as usize {
                        out.push((row[x / 8] >> (7 - x % 8)) & 1);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_dimensions_are_an_error_not_an_overflow() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&u32::MAX.to_le_bytes());
        raw.extend_from_slice(&u32::MAX.to_le_bytes());
        raw.extend_from_slice(&3u32.to_le_bytes());
        raw.extend_from_slice(b"RGB");
        raw.extend_from_slice(&[1, 2, 3]);
        assert!(parse(&raw).is_err());
    }
}
