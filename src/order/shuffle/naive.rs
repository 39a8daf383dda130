//! upstream `shuffle/naive.py`: one global permutation per epoch.

use super::ShuffleParams;
use crate::order::rng::NumpyRng;

/// `default_rng(seed + epoch).permutation(sum(units))`.
pub fn shuffle(p: ShuffleParams<'_>) -> Vec<u64> {
    let n: u64 = p.units.iter().sum();
    NumpyRng::new(p.seed.wrapping_add(p.epoch)).permutation(n)
}
