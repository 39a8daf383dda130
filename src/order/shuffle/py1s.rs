//! upstream `shuffle/py1s.py`: shuffle spans within each canonical node, then the samples of
//! each span.

use super::{prefix, Id, ShuffleParams};
use crate::order::rng::NumpyRng;

/// The py1s permutation.
pub fn shuffle<T: Id>(p: ShuffleParams<'_>) -> Vec<T> {
    let mut rng = NumpyRng::new(p.seed.wrapping_add(p.epoch));
    let (spans, _, n) = prefix(&p, &mut rng);
    let mut ids = Vec::with_capacity(n as usize);
    for (a, b) in spans {
        let start = ids.len();
        ids.extend((a..b).map(T::from_u64));
        rng.shuffle(&mut ids[start..]);
    }
    ids
}
