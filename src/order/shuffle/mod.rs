//! The shuffle algorithms of upstream `streaming/base/shuffle/` (MDS-SPEC §5.7). Each maps the
//! epoch's big sample indices to a permutation of themselves, given the shuffle units (the
//! resampled "shards"), num_canonical_nodes, seed, epoch and block size. All draw from numpy
//! generators in exactly upstream's order.

mod naive;
mod py1br;
mod py1e;
mod py1s;
mod py2s;

use super::rng::NumpyRng;
use super::{OrderError, ShuffleAlgo};

/// A half-open range of big sample indices.
pub(crate) type Span = (u64, u64);

/// Inputs common to every algorithm.
#[derive(Debug, Clone, Copy)]
pub struct ShuffleParams<'a> {
    /// Sizes of the shuffle units, in order.
    pub units: &'a [u64],
    /// num_canonical_nodes.
    pub canonical: u64,
    /// shuffle_seed.
    pub seed: u64,
    /// Epoch.
    pub epoch: u64,
    /// Block size (py1br, py1e).
    pub block_size: u64,
}

/// A sample index as the shuffles store it: `u32` while the epoch has fewer than 2^32
/// samples (half the memory and page faults), `u64` beyond.
pub trait Id: Copy + Default + Send + Sync + 'static {
    /// From an index known to fit.
    fn from_u64(v: u64) -> Self;
    /// As u64.
    fn get(self) -> u64;
}

impl Id for u32 {
    #[inline]
    fn from_u64(v: u64) -> Self {
        v as u32
    }
    #[inline]
    fn get(self) -> u64 {
        u64::from(self)
    }
}

impl Id for u64 {
    #[inline]
    fn from_u64(v: u64) -> Self {
        v
    }
    #[inline]
    fn get(self) -> u64 {
        self
    }
}

/// A shuffle: position → big sample index, stored narrow when it fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShuffleMap {
    /// Fewer than 2^32 samples.
    Narrow(Vec<u32>),
    /// 2^32 samples or more.
    Wide(Vec<u64>),
}

impl ShuffleMap {
    /// The big index at position `i`.
    #[inline]
    pub fn get(&self, i: u64) -> u64 {
        match self {
            ShuffleMap::Narrow(v) => u64::from(v[i as usize]),
            ShuffleMap::Wide(v) => v[i as usize],
        }
    }

    /// Number of positions.
    pub fn len(&self) -> usize {
        match self {
            ShuffleMap::Narrow(v) => v.len(),
            ShuffleMap::Wide(v) => v.len(),
        }
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map as u64s.
    pub fn to_vec(&self) -> Vec<u64> {
        match self {
            ShuffleMap::Narrow(v) => v.iter().map(|&x| u64::from(x)).collect(),
            ShuffleMap::Wide(v) => v.clone(),
        }
    }
}

/// upstream `get_shuffle(algo, ...)`: the permutation of `0..sum(units)`.
pub fn get_shuffle(algo: ShuffleAlgo, p: ShuffleParams<'_>) -> Result<ShuffleMap, OrderError> {
    if p.canonical == 0 {
        return Err(OrderError::NotPositive {
            what: "num_canonical_nodes",
        });
    }
    let n: u128 = p.units.iter().map(|&u| u128::from(u)).sum();
    if n <= u128::from(u32::MAX) {
        get_shuffle_as::<u32>(algo, p).map(ShuffleMap::Narrow)
    } else {
        get_shuffle_as::<u64>(algo, p).map(ShuffleMap::Wide)
    }
}

fn get_shuffle_as<T: Id>(algo: ShuffleAlgo, p: ShuffleParams<'_>) -> Result<Vec<T>, OrderError> {
    match algo {
        ShuffleAlgo::Naive => Ok(naive::shuffle(p)),
        ShuffleAlgo::Py1s => Ok(py1s::shuffle(p)),
        ShuffleAlgo::Py2s => Ok(py2s::shuffle(p)),
        ShuffleAlgo::Py1br => py1br::shuffle(p),
        ShuffleAlgo::Py1e => py1e::shuffle(p),
    }
}

/// The spans of the units, run-shuffled with `default_rng(seed)` (the list path), then divided
/// into canonical nodes and each node's span list shuffled with `epoch_rng`: the common prefix
/// of py1s, py1br and py1e. Returns (spans, per-node span ranges, total samples).
pub(crate) fn prefix(
    p: &ShuffleParams<'_>,
    epoch_rng: &mut NumpyRng,
) -> (Vec<Span>, Vec<(usize, usize)>, u64) {
    let mut spans = Vec::with_capacity(p.units.len());
    let mut n = 0u64;
    for &u in p.units {
        spans.push((n, n + u));
        n += u;
    }
    NumpyRng::new(p.seed).shuffle(&mut spans);
    let (mut spans, parts) = divide_spans(spans, n, p.canonical);
    for &(a, b) in &parts {
        epoch_rng.shuffle(&mut spans[a..b]);
    }
    (spans, parts, n)
}

/// upstream `py1s.divide_spans`: cut the span list into `parts` consecutive groups of
/// ⌊n(c+1)/parts⌋ cumulative samples, splitting a span that crosses a boundary.
pub(crate) fn divide_spans(
    mut spans: Vec<Span>,
    n: u64,
    parts: u64,
) -> (Vec<Span>, Vec<(usize, usize)>) {
    let mut out = Vec::with_capacity(spans.len() + parts as usize);
    let mut supers = Vec::with_capacity(parts as usize);
    let mut begin_part = 0usize;
    let mut idx = 0usize;
    let mut so_far = 0u64;
    for part in 0..parts {
        let part_end = (u128::from(n) * u128::from(part + 1) / u128::from(parts)) as u64;
        while idx < spans.len() {
            let span = spans[idx];
            let size = span.1 - span.0;
            if part_end < so_far + size {
                if so_far < part_end {
                    let split = part_end - so_far;
                    out.push((span.0, span.0 + split));
                    spans[idx] = (span.0 + split, span.1);
                    so_far += split;
                }
                break;
            }
            out.push(span);
            idx += 1;
            so_far += size;
        }
        supers.push((begin_part, out.len()));
        begin_part = out.len();
    }
    (out, supers)
}

/// Python's `int(x * f)` for a block-size fraction: f64 multiply, then truncation.
#[inline]
pub(crate) fn trunc_mul(block_size: u64, f: f64) -> i64 {
    (block_size as f64 * f) as i64
}
