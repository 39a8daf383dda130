//! upstream `shuffle/py1br.py`: like py1s for the span order, then shuffle staggered blocks of
//! random size (0.75–1.25 × block size) within each canonical node.

use super::{prefix, trunc_mul, Id, ShuffleParams};
use crate::order::rng::NumpyRng;
use crate::order::OrderError;

/// The py1br permutation.
pub fn shuffle<T: Id>(p: ShuffleParams<'_>) -> Result<Vec<T>, OrderError> {
    let too_small = || OrderError::BlockSizeTooSmall {
        block_size: p.block_size,
        algo: "py1br",
    };
    let mut rng = NumpyRng::new(p.seed.wrapping_add(p.epoch));
    let (spans, parts, n) = prefix(&p, &mut rng);
    let mut ids = Vec::with_capacity(n as usize);
    let hi_stagger = trunc_mul(p.block_size, 0.75);
    let mut stagger = Vec::with_capacity(parts.len());
    for _ in 0..p.canonical {
        stagger.push(rng.integers(0, hi_stagger).ok_or_else(too_small)?);
    }
    let lo = trunc_mul(p.block_size, 0.75);
    let hi = trunc_mul(p.block_size, 1.25);
    for (node, &(a, b)) in parts.iter().enumerate() {
        let node_start = ids.len() as i64;
        for &(s, e) in &spans[a..b] {
            ids.extend((s..e).map(T::from_u64));
        }
        let node_stop = ids.len() as i64;
        let node_stagger = stagger[node];
        let mut ranges = Vec::new();
        let mut end = node_start;
        while end < node_stop {
            let size = rng.integers(lo, hi).ok_or_else(too_small)?;
            let start = (end - node_stagger).max(node_start);
            let stop = (end + size - node_stagger).min(node_stop);
            ranges.push((start, stop));
            end += stop - start;
        }
        for (s, e) in ranges {
            // Python slicing: an empty or reversed range shuffles nothing.
            if s < e {
                rng.shuffle(&mut ids[s as usize..e as usize]);
            }
        }
    }
    Ok(ids)
}
