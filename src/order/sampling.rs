//! Per-epoch resampling (upstream `sampling.get_sampling` and
//! `StreamingDataset.resample_streams`, MDS-SPEC §5.3): how many samples each shard
//! contributes this epoch, the shuffle units that result, and the map from the epoch's "big"
//! indices to global sample ids.

use super::rng::NumpyRng;
use super::OrderError;

/// upstream `get_sampling`: samples drawn from each shard of one stream.
pub fn get_sampling(
    shard_samples: &[u64],
    choose: u64,
    granularity: u64,
    seed: u64,
    epoch: u64,
    use_epoch: bool,
) -> Result<Vec<u64>, OrderError> {
    if granularity == 0 {
        return Err(OrderError::NotPositive {
            what: "sampling_granularity",
        });
    }
    let total: u64 = shard_samples.iter().sum();
    if total == 0 {
        return Err(OrderError::EmptyStream { stream: 0 });
    }
    if choose % total == 0 {
        return Ok(shard_samples
            .iter()
            .map(|&s| (u128::from(s) * u128::from(choose) / u128::from(total)) as u64)
            .collect());
    }
    let mut pick_shard = Vec::new();
    let mut pick_size = Vec::new();
    for (shard, &s) in shard_samples.iter().enumerate() {
        let picks = s.div_ceil(granularity);
        for k in 0..picks {
            pick_shard.push(shard);
            pick_size.push(if k + 1 == picks {
                s - (picks - 1) * granularity
            } else {
                granularity
            });
        }
    }
    let seed = if use_epoch {
        seed.wrapping_add(epoch)
    } else {
        seed
    };
    let order = NumpyRng::new(seed).permutation(pick_shard.len() as u64);
    let mut out: Vec<u64> = shard_samples
        .iter()
        .map(|&s| s * (choose / total))
        .collect();
    let mut left = choose % total;
    for pick in order {
        let take = pick_size[pick as usize].min(left);
        out[pick_shard[pick as usize]] += take;
        left -= take;
        if left == 0 {
            break;
        }
    }
    Ok(out)
}

/// Maps the epoch's big sample indices to global sample ids.
#[derive(Debug, Clone)]
pub enum SampleMap {
    /// Big index i is sample i (every shard drawn exactly once, all streams).
    Identity,
    /// An explicit table.
    Table(Vec<u64>),
}

impl SampleMap {
    /// The global sample id of big index `big`.
    #[inline]
    pub fn get(&self, big: u64) -> u64 {
        match self {
            SampleMap::Identity => big,
            SampleMap::Table(t) => t[big as usize],
        }
    }

    /// Number of entries, given the epoch size for the identity map.
    pub fn len_or(&self, n: u64) -> u64 {
        match self {
            SampleMap::Identity => n,
            SampleMap::Table(t) => t.len() as u64,
        }
    }
}

/// One stream's shards as the resampler sees them.
#[derive(Debug, Clone, Copy)]
pub struct StreamShards<'a> {
    /// Sample count of each shard.
    pub shard_samples: &'a [u64],
    /// Global id of the stream's first sample.
    pub first_sample: u64,
    /// Samples to draw this epoch.
    pub choose: u64,
}

/// Options of the resampler.
#[derive(Debug, Clone, Copy)]
pub struct ResampleParams {
    /// shuffle_seed.
    pub seed: u64,
    /// Epoch.
    pub epoch: u64,
    /// sampling_method == balanced.
    pub balanced: bool,
    /// shuffle && balanced (get_sampling's seed rule).
    pub epoch_seed_change: bool,
    /// sampling_granularity.
    pub granularity: u64,
}

/// upstream `resample_streams(epoch[, stream_id])` over the given streams (all of them, or
/// one): the shuffle units and the big→small map. `all_streams` says whether `streams` is the
/// whole dataset, which allows the identity map.
pub fn resample(
    streams: &[StreamShards<'_>],
    p: ResampleParams,
    all_streams: bool,
) -> Result<(Vec<u64>, SampleMap), OrderError> {
    let mut rng = NumpyRng::new(if p.balanced {
        p.seed.wrapping_add(p.epoch)
    } else {
        p.seed
    });
    let mut per_stream = Vec::with_capacity(streams.len());
    let mut identity = all_streams;
    for s in streams {
        let c = get_sampling(
            s.shard_samples,
            s.choose,
            p.granularity,
            p.seed,
            p.epoch,
            p.epoch_seed_change,
        )?;
        identity &= c.iter().zip(s.shard_samples).all(|(a, b)| a == b);
        per_stream.push(c);
    }
    let mut units = Vec::new();
    if identity {
        for s in streams {
            units.extend(s.shard_samples.iter().filter(|&&n| n > 0));
        }
        return Ok((units, SampleMap::Identity));
    }
    let mut table = Vec::new();
    for (s, chooses) in streams.iter().zip(&per_stream) {
        let mut offset = s.first_sample;
        for (&n, &c) in s.shard_samples.iter().zip(chooses) {
            if n == 0 {
                // numpy: c // 0 and c % 0 are 0 (with a warning): no units, no ids.
                continue;
            }
            let full = c / n;
            for _ in 0..full {
                units.push(n);
                table.extend(offset..offset + n);
            }
            let rem = c % n;
            if rem != 0 {
                units.push(rem);
                let mut picked = rng
                    .choice_without_replacement(n, rem)
                    .ok_or(OrderError::Overflow("partial repeat larger than shard"))?;
                picked.sort_unstable();
                table.extend(picked.into_iter().map(|i| offset + i));
            }
            offset += n;
        }
    }
    Ok((units, SampleMap::Table(table)))
}
