//! Stream weights (upstream `Stream.validate_weights` / `apply_weights`, MDS-SPEC §5.2): how
//! many samples each stream contributes per epoch, and its proportion of the epoch.

use super::rng::NumpyRng;
use super::{OrderError, StreamSpec, StreamWeight};

/// What `apply_weights` derived for one stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamDraw {
    /// Samples drawn from the stream per epoch.
    pub choose: u64,
    /// The stream's share of the epoch (used to scale block sizes and batch portions).
    pub proportion: f64,
}

/// numpy's float64 `sum` (pairwise summation with 8 accumulators, blocks of 128), starting
/// from the additive identity as numpy's reduction does.
pub(crate) fn numpy_sum(a: &[f64]) -> f64 {
    0.0 + pairwise(a)
}

fn pairwise(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for &x in a {
            res += x;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - n % 8 {
            for (k, acc) in r.iter_mut().enumerate() {
                *acc += a[i + k];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += a[i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise(&a[..n2]) + pairwise(&a[n2..])
    }
}

/// Derives each stream's draw and the epoch size. `samples` holds each stream's sample count.
pub fn apply_weights(
    streams: &[StreamSpec],
    samples: &[u64],
    epoch_size: Option<u64>,
    seed: u64,
) -> Result<(Vec<StreamDraw>, u64), OrderError> {
    let first = streams.first().ok_or(OrderError::NoStreams)?;
    let relative = matches!(first.weight, StreamWeight::Proportion(_));
    let mut unspecified = true;
    for (i, s) in streams.iter().enumerate() {
        let (is_prop, bad) = match s.weight {
            StreamWeight::Unset => (false, None),
            StreamWeight::Proportion(p) => (
                true,
                (!(p >= 0.0 && p.is_finite())).then_some(("proportion", p)),
            ),
            StreamWeight::Repeat(r) => (
                false,
                (!(r >= 0.0 && r.is_finite())).then_some(("repeat", r)),
            ),
            StreamWeight::Choose(_) => (false, None),
        };
        if let Some((what, value)) = bad {
            return Err(OrderError::BadWeight {
                stream: i,
                what,
                value,
            });
        }
        if relative != is_prop {
            return Err(OrderError::MixedWeights { stream: i });
        }
        if !matches!(s.weight, StreamWeight::Unset) {
            unspecified = false;
        }
    }
    for (i, &n) in samples.iter().enumerate() {
        if n == 0 {
            return Err(OrderError::EmptyStream { stream: i });
        }
    }
    let epoch_size = epoch_size.filter(|&e| e != 0);
    let total: u64 = samples.iter().sum();
    if relative || (unspecified && epoch_size.is_some()) {
        let e = epoch_size.unwrap_or(total);
        let mut props: Vec<f64> = if relative {
            streams
                .iter()
                .map(|s| match s.weight {
                    StreamWeight::Proportion(p) => p,
                    _ => 0.0,
                })
                .collect()
        } else {
            samples.iter().map(|&n| n as f64).collect()
        };
        let sum = numpy_sum(&props);
        if sum.is_nan() || sum <= 0.0 {
            return Err(OrderError::BadWeight {
                stream: 0,
                what: "proportion (sum)",
                value: sum,
            });
        }
        for p in props.iter_mut() {
            *p /= sum;
        }
        let mut choose: Vec<u64> = props
            .iter()
            .map(|&p| (e as f64 * p) as i64 as u64)
            .collect();
        let got: u64 = choose.iter().sum();
        let shortfall = e
            .checked_sub(got)
            .ok_or(OrderError::Overflow("proportions sum above 1"))?;
        let picks = NumpyRng::new(seed)
            .choice_without_replacement(streams.len() as u64, shortfall)
            .ok_or(OrderError::Overflow(
                "proportion shortfall exceeds stream count",
            ))?;
        for i in picks {
            choose[i as usize] += 1;
        }
        let draws = choose
            .iter()
            .zip(&props)
            .map(|(&c, &p)| StreamDraw {
                choose: c,
                proportion: p,
            })
            .collect();
        Ok((draws, e))
    } else {
        if epoch_size.is_some() {
            return Err(OrderError::EpochSizeWithAbsoluteWeights);
        }
        let choose: Vec<u64> = streams
            .iter()
            .zip(samples)
            .map(|(s, &n)| match s.weight {
                StreamWeight::Repeat(r) => (r * n as f64) as u64,
                StreamWeight::Choose(c) => c,
                _ => n,
            })
            .collect();
        let e: u64 = choose.iter().sum();
        let draws = choose
            .iter()
            .map(|&c| StreamDraw {
                choose: c,
                proportion: c as f64 / e as f64,
            })
            .collect();
        Ok((draws, e))
    }
}
