//! upstream `shuffle/py1e.py` (the default): per canonical node, shuffle each span's samples,
//! then give every sample a position jittered uniformly within ±(block − span)/2 of its own
//! and sort by position. Shards thus spread over a window about one block wide.
//!
//! Sorting: numpy's `argsort` is an unstable quicksort, but positions are continuous random
//! values, so exact ties do not occur in practice (MDS-SPEC §5.7) and a stable order
//! reproduces it. The bounds keep every position in `[0, n − 1]` (the lower bound is at least
//! `−offset`, the upper at most `n − offset − span`), so the integer part of a position is a
//! bucket in `0..n` holding about one sample on average: a counting sort by bucket, then an
//! insertion sort inside each tiny bucket, sorts in linear time (in two cache-friendly levels). To avoid storing every
//! position, the jitter draws are made twice from identical generator states (once to count,
//! once to place), which costs far less than the memory and the O(n log n) sort it replaces.

use super::{prefix, trunc_mul, Id, ShuffleParams, Span};
use crate::order::rng::NumpyRng;
use crate::order::OrderError;

/// The py1e permutation.
pub fn shuffle<T: Id>(p: ShuffleParams<'_>) -> Result<Vec<T>, OrderError> {
    let mut rng = NumpyRng::new(p.seed.wrapping_add(p.epoch));
    let (spans, parts, n) = prefix(&p, &mut rng);
    let mut ids: Vec<T> = Vec::with_capacity(n as usize);
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
            ids.extend((s..e).map(T::from_u64));
            rng.shuffle(&mut ids[at..]);
        }
        let samples = &mut ids[start..];
        let jitter = Jitter::new(cn_spans, p.block_size);
        if cn_n < u64::from(u32::MAX) {
            jitter.bucket_sort(&mut rng, samples)?;
        } else {
            jitter.key_sort(&mut rng, samples)?;
        }
    }
    Ok(ids)
}

/// What the jittered positions of one canonical node's samples are drawn from: its spans and
/// the range of block sizes (¾ to 1¼ of `shuffle_block_size`).
#[derive(Clone, Copy)]
struct Jitter<'a> {
    spans: &'a [Span],
    block_size: u64,
    blocks: (i64, i64),
}

impl<'a> Jitter<'a> {
    fn new(spans: &'a [Span], block_size: u64) -> Self {
        let blocks = (trunc_mul(block_size, 0.75), trunc_mul(block_size, 1.25));
        Jitter {
            spans,
            block_size,
            blocks,
        }
    }

    /// Draws each span's jitter bounds and its `n` samples' positions, in upstream's order,
    /// calling `visit(index in the canonical node, position)`.
    fn for_each_position(
        self,
        rng: &mut NumpyRng,
        n: u64,
        mut visit: impl FnMut(usize, f64),
    ) -> Result<(), OrderError> {
        let n_f = n as f64;
        let mut offset = 0u64;
        let (lo_block, hi_block) = self.blocks;
        for &(s, e) in self.spans {
            let size = e - s;
            let block = rng
                .integers(lo_block, hi_block)
                .ok_or(OrderError::BlockSizeTooSmall {
                    block_size: self.block_size,
                    algo: "py1e",
                })?;
            let mut cutoff = (block as f64 - size as f64) / 2.0;
            if cutoff < 0.0 {
                cutoff = 0.0;
            }
            let lower = py_max(-cutoff, -(offset as f64));
            let upper = py_min(cutoff, n_f - offset as f64 - size as f64);
            let range = upper - lower;
            for i in offset..offset + size {
                let shift = lower + range * rng.next_double();
                visit(i as usize, i as f64 + shift);
            }
            offset += size;
        }
        Ok(())
    }

    /// Linear-time stable sort of `samples` by jittered position (see the module note).
    ///
    /// Two counting passes keep memory traffic local: first by coarse bucket (`pos >> shift`,
    /// at most ~2048 of them, so the scatter writes stay in cache), then, inside each coarse
    /// bucket, by integer position (a table of `1 << shift` counters that fits in L2), and
    /// finally an insertion sort inside each integer bucket (usually 0–3 entries).
    fn bucket_sort<T: Id>(self, rng: &mut NumpyRng, samples: &mut [T]) -> Result<(), OrderError> {
        let n = samples.len();
        let last = n - 1;
        let mut shift = 6u32;
        while (n >> shift) > 2048 {
            shift += 1;
        }
        let coarse_n = (last >> shift) + 1;
        // Positions are in [0, n), far below 2^63: the signed conversion is the cheap one.
        let bucket = |pos: f64| (pos as i64 as usize).min(last);
        // Pass 1 on a copy of the generator: coarse bucket sizes.
        let mut starts = vec![0usize; coarse_n + 1];
        let mut replay = rng.clone();
        self.for_each_position(&mut replay, n as u64, |_, pos| {
            starts[(bucket(pos) >> shift) + 1] += 1;
        })?;
        for i in 1..=coarse_n {
            starts[i] += starts[i - 1];
        }
        // Pass 2 with the real generator (same draws): place (position, sample) by coarse bucket,
        // in index order, so equal positions keep upstream's stable order.
        let mut keys = vec![0f64; n];
        let mut placed = vec![T::default(); n];
        let mut next = starts.clone();
        self.for_each_position(rng, n as u64, |i, pos| {
            let slot = &mut next[bucket(pos) >> shift];
            keys[*slot] = pos;
            placed[*slot] = samples[i];
            *slot += 1;
        })?;
        // Pass 3: inside each coarse bucket, a stable counting sort by integer position, written
        // straight to `samples`, then insertion sort inside each integer bucket.
        let width = 1usize << shift;
        let mut counts = vec![0u32; width + 1];
        let mut fine_keys: Vec<f64> = Vec::new();
        for c in 0..coarse_n {
            let (lo, hi) = (starts[c], starts[c + 1]);
            if hi == lo {
                continue;
            }
            let base = c << shift;
            counts.iter_mut().for_each(|x| *x = 0);
            for &k in &keys[lo..hi] {
                counts[bucket(k) - base + 1] += 1;
            }
            for i in 1..=width {
                counts[i] += counts[i - 1];
            }
            fine_keys.clear();
            fine_keys.resize(hi - lo, 0.0);
            let out = &mut samples[lo..hi];
            for j in lo..hi {
                let slot = &mut counts[bucket(keys[j]) - base];
                fine_keys[*slot as usize] = keys[j];
                out[*slot as usize] = placed[j];
                *slot += 1;
            }
            // counts[f] is now the end of integer bucket f.
            let mut begin = 0usize;
            for &end in &counts[..width] {
                let end = end as usize;
                for j in begin + 1..end {
                    let (key, sample) = (fine_keys[j], out[j]);
                    let mut k = j;
                    while k > begin && fine_keys[k - 1] > key {
                        fine_keys[k] = fine_keys[k - 1];
                        out[k] = out[k - 1];
                        k -= 1;
                    }
                    fine_keys[k] = key;
                    out[k] = sample;
                }
                begin = end;
            }
        }
        Ok(())
    }

    /// Comparison-sort fallback for canonical nodes of 2^32 samples or more.
    fn key_sort<T: Id>(self, rng: &mut NumpyRng, samples: &mut [T]) -> Result<(), OrderError> {
        let mut keyed: Vec<(u64, T)> = Vec::with_capacity(samples.len());
        self.for_each_position(rng, samples.len() as u64, |i, pos| {
            // Positions are ≥ +0.0, so their bit patterns order like the values.
            let key = if pos == 0.0 { 0 } else { pos.to_bits() };
            keyed.push((key, samples[i]));
        })?;
        keyed.sort_by_key(|e| e.0);
        for (slot, e) in samples.iter_mut().zip(keyed) {
            *slot = e.1;
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket sort and the comparison sort give the same order.
    #[test]
    fn bucket_sort_equals_key_sort() {
        let spans: Vec<Span> = vec![(0, 37), (100, 101), (37, 100), (101, 400), (400, 403)];
        for (seed, bs) in [(1u64, 10u64), (2, 100), (3, 1000), (4, 4), (5, 2)] {
            let jitter = Jitter::new(&spans, bs);
            let base: Vec<u64> = (0..403).rev().collect();
            let (mut a, mut b) = (base.clone(), base);
            let mut r1 = NumpyRng::new(seed);
            let mut r2 = NumpyRng::new(seed);
            let ra = jitter.bucket_sort(&mut r1, &mut a);
            let rb = jitter.key_sort(&mut r2, &mut b);
            assert_eq!(ra, rb);
            assert_eq!(a, b, "seed {seed} bs {bs}");
            assert_eq!(
                r1.next_u64(),
                r2.next_u64(),
                "generators end in the same state"
            );
        }
    }
}
