//! upstream `shuffle/py1e.py` (the default): per canonical node, shuffle each span's samples,
//! then give every sample a position jittered uniformly within ±(block − span)/2 of its own
//! and sort by position. Shards thus spread over a window about one block wide.
//!
//! numpy's `argsort` is an unstable quicksort; positions are continuous random values, so
//! exact ties do not occur in practice (MDS-SPEC §5.7) and a stable sort reproduces it.
//! Positions are never negative (the lower bound keeps them ≥ 0), so their IEEE bit patterns
//! order exactly like the values; sorting `(bits, sample)` pairs by bits is cache friendly.

use super::{prefix, trunc_mul, ShuffleParams};
use crate::order::rng::NumpyRng;
use crate::order::OrderError;

/// The py1e permutation.
pub fn shuffle(p: ShuffleParams<'_>) -> Result<Vec<u64>, OrderError> {
    let mut rng = NumpyRng::new(p.seed.wrapping_add(p.epoch));
    let (spans, parts, n) = prefix(&p, &mut rng);
    let lo_block = trunc_mul(p.block_size, 0.75);
    let hi_block = trunc_mul(p.block_size, 1.25);
    let mut ids: Vec<u64> = Vec::with_capacity(n as usize);
    let mut keyed: Vec<(u64, u64)> = Vec::new();
    for &(a, b) in &parts {
        let cn_spans = &spans[a..b];
        let cn_n: u64 = cn_spans.iter().map(|s| s.1 - s.0).sum();
        if cn_n == 0 {
            return Err(OrderError::EmptyCanonicalNode {
                canonical: p.canonical,
            });
        }
        let start = ids.len();
        for &(s, e) in cn_spans {
            let at = ids.len();
            ids.extend(s..e);
            rng.shuffle(&mut ids[at..]);
        }
        keyed.clear();
        keyed.reserve(cn_n as usize);
        let cn_f = cn_n as f64;
        let mut offset = 0u64;
        for &(s, e) in cn_spans {
            let size = e - s;
            let block = rng
                .integers(lo_block, hi_block)
                .ok_or(OrderError::BlockSizeTooSmall {
                    block_size: p.block_size,
                    algo: "py1e",
                })?;
            let mut cutoff = (block as f64 - size as f64) / 2.0;
            if cutoff < 0.0 {
                cutoff = 0.0;
            }
            let lower = py_max(-cutoff, -(offset as f64));
            let upper = py_min(cutoff, cn_f - offset as f64 - size as f64);
            let range = upper - lower;
            for i in 0..size {
                let shift = lower + range * rng.next_double();
                let pos = (offset + i) as f64 + shift;
                let key = if pos == 0.0 { 0 } else { pos.to_bits() };
                keyed.push((key, ids[start + (offset + i) as usize]));
            }
            offset += size;
        }
        keyed.sort_by_key(|e| e.0);
        for (slot, e) in ids[start..].iter_mut().zip(keyed.iter()) {
            *slot = e.1;
        }
    }
    Ok(ids)
}

/// Python's `max(a, b)`: the first argument unless the second is strictly greater.
#[inline]
fn py_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Python's `min(a, b)`: the first argument unless the second is strictly smaller.
#[inline]
fn py_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}
