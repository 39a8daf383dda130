//! upstream `shuffle/py2s.py`: a run-fixed shuffle of shards and of each shard's samples, then
//! per canonical node an epoch shuffle of the shard pieces and of each piece's samples.

use super::{Id, ShuffleParams};
use crate::order::rng::NumpyRng;

/// The py2s permutation.
pub fn shuffle<T: Id>(p: ShuffleParams<'_>) -> Vec<T> {
    let mut ranges = Vec::with_capacity(p.units.len());
    let mut n = 0u64;
    for &u in p.units {
        ranges.push((n, n + u));
        n += u;
    }
    let mut fixed = NumpyRng::new(p.seed);
    fixed.shuffle(&mut ranges);
    // Lay the shards out in their shuffled order; pieces are (start, len) into `samples`.
    let mut samples: Vec<T> = Vec::with_capacity(n as usize);
    let mut pieces: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        let start = samples.len();
        samples.extend((a..b).map(T::from_u64));
        fixed.shuffle(&mut samples[start..]);
        pieces.push((start, (b - a) as usize));
    }
    // `_partition`: same cutting rule as divide_spans.
    let parts = p.canonical;
    let mut lists: Vec<Vec<(usize, usize)>> = Vec::with_capacity(parts as usize);
    let mut idx = 0usize;
    let mut so_far = 0u64;
    for part in 0..parts {
        let part_end = (u128::from(n) * u128::from(part + 1) / u128::from(parts)) as u64;
        let mut list = Vec::new();
        while idx < pieces.len() {
            let (start, len) = pieces[idx];
            if part_end < so_far + len as u64 {
                if so_far < part_end {
                    let split = (part_end - so_far) as usize;
                    list.push((start, split));
                    pieces[idx] = (start + split, len - split);
                    so_far += split as u64;
                }
                break;
            }
            list.push((start, len));
            idx += 1;
            so_far += len as u64;
        }
        lists.push(list);
    }
    let mut rng = NumpyRng::new(p.seed.wrapping_add(p.epoch));
    let mut out = Vec::with_capacity(n as usize);
    for mut list in lists {
        rng.shuffle(&mut list);
        for &(start, len) in &list {
            rng.shuffle(&mut samples[start..start + len]);
        }
        for (start, len) in list {
            out.extend_from_slice(&samples[start..start + len]);
        }
    }
    out
}
