//! Whole-shard compression (MDS-SPEC §4): one blob per shard, so a compressed shard is fetched
//! and decompressed as a whole before any sample can be read.
//!
//! Decompression is bounded: the output may not exceed the raw size `index.json` gives (or
//! [`MAX_RAW_SHARD`] when unknown), so a small malicious file cannot expand without limit, and
//! when the size is known the output must match it exactly.

use super::error::{MdsError, Result};
use super::index::{Algo, Compression};
use std::io::{Read, Write};

/// The largest raw shard any MDS writer can produce: offsets are u32, so 4 GiB.
pub const MAX_RAW_SHARD: u64 = 1 << 32;

fn fail(algo: Algo, msg: impl ToString) -> MdsError {
    MdsError::Decompress {
        algo: algo.name(),
        msg: msg.to_string(),
    }
}

/// Reads a decoder to its end, refusing more than `limit` bytes of output.
/// `size_hint` only sizes the first allocation, which is capped so that a lying index cannot
/// make a tiny input reserve gigabytes up front.
fn read_bounded(algo: Algo, reader: impl Read, limit: u64, size_hint: u64) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(size_hint.min(limit).min(1 << 26) as usize);
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| fail(algo, e))?;
    if out.len() as u64 > limit {
        return Err(fail(
            algo,
            format!("output exceeds the limit of {limit} bytes"),
        ));
    }
    Ok(out)
}

/// Decompresses a whole shard. `raw_len_hint` is the raw size from `index.json`
/// (`raw_data.bytes`): output is bounded by it and must equal it.
pub fn decompress(c: &Compression, data: &[u8], raw_len_hint: Option<u64>) -> Result<Vec<u8>> {
    let limit = raw_len_hint.unwrap_or(MAX_RAW_SHARD);
    // Start with room for the expected size, but no more than 64x the input.
    let hint = limit.min((data.len() as u64).saturating_mul(64));
    let algo = c.algo;
    let out = match algo {
        Algo::Zstd => {
            let dec = zstd::stream::read::Decoder::new(data).map_err(|e| fail(algo, e))?;
            read_bounded(algo, dec, limit, hint)?
        }
        Algo::Gz => read_bounded(algo, flate2::read::MultiGzDecoder::new(data), limit, hint)?,
        Algo::Bz2 => read_bounded(algo, bzip2::read::MultiBzDecoder::new(data), limit, hint)?,
        Algo::Br => read_bounded(algo, brotli::Decompressor::new(data, 1 << 16), limit, hint)?,
        Algo::Snappy => {
            let len = snap::raw::decompress_len(data).map_err(|e| fail(algo, e))? as u64;
            if len > limit {
                return Err(fail(
                    algo,
                    format!("stream declares {len} bytes, over the limit of {limit}"),
                ));
            }
            snap::raw::Decoder::new()
                .decompress_vec(data)
                .map_err(|e| fail(algo, e))?
        }
    };
    if let Some(want) = raw_len_hint {
        if out.len() as u64 != want {
            return Err(MdsError::SizeMismatch {
                expected: want,
                actual: out.len() as u64,
            });
        }
    }
    Ok(out)
}

/// Compresses a whole shard as the Python writer does (used by [`super::writer`]).
/// Levels default as upstream: br 11, bz2 9, gz 9, zstd 3.
pub fn compress(c: &Compression, data: &[u8]) -> Result<Vec<u8>> {
    let algo = c.algo;
    let io = |e: std::io::Error| fail(algo, e);
    match algo {
        Algo::Zstd => {
            let mut enc = zstd::bulk::Compressor::new(c.level.unwrap_or(3)).map_err(io)?;
            enc.include_contentsize(true).map_err(io)?;
            enc.compress(data).map_err(io)
        }
        Algo::Gz => {
            let level = c.level.unwrap_or(9).clamp(0, 9) as u32;
            let mut enc = flate2::GzBuilder::new()
                .mtime(0)
                .write(Vec::new(), flate2::Compression::new(level));
            enc.write_all(data).map_err(io)?;
            enc.finish().map_err(io)
        }
        Algo::Bz2 => {
            let level = c.level.unwrap_or(9).clamp(1, 9) as u32;
            let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::new(level));
            enc.write_all(data).map_err(io)?;
            enc.finish().map_err(io)
        }
        Algo::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: c.level.unwrap_or(11).clamp(0, 11),
                ..Default::default()
            };
            let mut out = Vec::new();
            brotli::BrotliCompress(&mut &data[..], &mut out, &params).map_err(io)?;
            Ok(out)
        }
        Algo::Snappy => snap::raw::Encoder::new()
            .compress_vec(data)
            .map_err(|e| fail(algo, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_bounds_output() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for spec in ["zstd:7", "gz", "bz2:5", "br:4", "snappy"] {
            let c: Compression = spec.parse().unwrap();
            let z = compress(&c, &data).unwrap();
            assert_eq!(
                decompress(&c, &z, Some(data.len() as u64)).unwrap(),
                data,
                "{spec}"
            );
            assert_eq!(decompress(&c, &z, None).unwrap(), data, "{spec}");
            let err = decompress(&c, &z, Some(1000)).unwrap_err();
            assert!(
                matches!(
                    err,
                    MdsError::Decompress { .. } | MdsError::SizeMismatch { .. }
                ),
                "{spec}: {err}"
            );
            assert!(
                decompress(&c, &z[..z.len() / 2], Some(data.len() as u64)).is_err(),
                "{spec}"
            );
            assert!(
                decompress(&c, b"not compressed at all", None).is_err(),
                "{spec}"
            );
        }
    }
}
