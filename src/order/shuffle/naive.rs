//! upstream `shuffle/naive.py`: one global permutation per epoch.

use super::{Id, ShuffleParams};
use crate::order::rng::NumpyRng;

/// `default_rng(seed + epoch).permutation(sum(units))`.
pub fn shuffle<T: Id>(p: ShuffleParams<'_>) -> Vec<T> {
    let n: u64 = p.units.iter().sum();
    let mut ids: Vec<T> = (0..n).map(T::from_u64).collect();
    NumpyRng::new(p.seed.wrapping_add(p.epoch)).shuffle(&mut ids);
    ids
}
