//! An epoch's work (the array upstream's `generate_work` returns) and the batching methods
//! other than `random` (upstream `batching/stratified.py`, `per_stream.py`,
//! `device_per_stream.py`, MDS-SPEC §5.8). `random` stays lazy (partition + shuffle + map,
//! resolved per element); the others reorder whole batches across streams, so they are built
//! as one explicit array of global ids over the parallel world.

use super::partition::{Partition, Shape, PAD};
use super::rng::NumpyRng;
use super::sampling::{self, SampleMap};
use super::shuffle::ShuffleMap;
use super::{BatchingMethod, OrderError, Planner};

/// One epoch's sample assignment.
#[derive(Debug)]
pub enum Work {
    /// `random` batching: partition → shuffle → big→small map, per element.
    Random {
        /// The partition of big indices.
        partition: Partition,
        /// The shuffle of big indices, if shuffling.
        shuffle: Option<ShuffleMap>,
        /// Big index → global sample id.
        map: SampleMap,
    },
    /// An explicit array of global ids.
    Dense(Partition),
}

impl Work {
    /// A rank's read order directly, when the layout allows it without modelling workers
    /// (`random` batching over an `orig` partition: padding only trails, so the DataLoader
    /// reads the rank's sequence in order). `None` means: use the worker model.
    pub fn rank_read_order(&self, node: u64, rank: u64) -> Option<Vec<u64>> {
        match self {
            Work::Random {
                partition: Partition::Orig(o),
                shuffle,
                map,
            } => {
                let mut out = Vec::new();
                o.rank_sequence(node, rank, &mut out);
                match shuffle {
                    Some(s) => {
                        for v in &mut out {
                            *v = map.get(s.get(*v));
                        }
                    }
                    None => {
                        if let SampleMap::Table(_) = map {
                            for v in &mut out {
                                *v = map.get(*v);
                            }
                        }
                    }
                }
                Some(out)
            }
            _ => None,
        }
    }

    /// The array's shape.
    pub fn shape(&self) -> Shape {
        match self {
            Work::Random { partition, .. } => partition.shape(),
            Work::Dense(p) => p.shape(),
        }
    }

    /// Global ids of `[node][rank][worker]` flattened, `PAD` for -1, appended to `out`.
    pub fn worker_ids(&self, node: u64, rank: u64, worker: u64, out: &mut Vec<u64>) {
        match self {
            Work::Random {
                partition,
                shuffle,
                map,
            } => {
                let start = out.len();
                partition.worker_slots(node, rank, worker, out);
                for v in &mut out[start..] {
                    if *v != PAD {
                        let big = match shuffle {
                            Some(s) => s.get(*v),
                            None => *v,
                        };
                        *v = map.get(big);
                    }
                }
            }
            Work::Dense(p) => p.worker_slots(node, rank, worker, out),
        }
    }
}

/// One stream's partition, shuffled and mapped to global ids, in upstream's C order, plus its
/// shape.
fn stream_partition(
    planner: &Planner,
    stream: usize,
    epoch: u64,
    nodes: u64,
    batch: u64,
    check_portion: bool,
) -> Result<(Shape, Vec<u64>), OrderError> {
    let shards = [planner.stream_shards(stream)];
    let (units, map) = sampling::resample(&shards, planner.resample_params(epoch), false)?;
    let n = map.len_or(units.iter().sum());
    let part = Partition::new(planner.partition_params(n, nodes, batch, 0))?;
    let shape = part.shape();
    let mut data = part.to_dense();
    let shuffle = if planner.opts.shuffle {
        let block = (planner.block_size as f64 * planner.draws[stream].proportion) as u64;
        if check_portion && block == 0 {
            return Err(OrderError::StreamBatches {
                stream,
                reason: format!(
                    "is not used: shuffle_block_size {} × proportion {} is 0",
                    planner.block_size, planner.draws[stream].proportion
                ),
            });
        }
        Some(planner.shuffle_ids(&units, epoch, block)?)
    } else {
        None
    };
    for v in &mut data {
        if *v != PAD {
            let big = shuffle.as_ref().map_or(*v, |s| s.get(*v));
            *v = map.get(big);
        }
    }
    Ok((shape, data))
}

/// A C-order array read in consumption order `transpose(3, 2, 0, 1, 4).flatten()`.
fn consumption_order(shape: Shape, data: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(data.len());
    let s = shape;
    for j in 0..s.batches {
        for w in 0..s.workers {
            for p in 0..s.nodes {
                for r in 0..s.ranks {
                    let base =
                        ((((p * s.ranks + r) * s.workers + w) * s.batches + j) * s.batch) as usize;
                    out.extend_from_slice(&data[base..base + s.batch as usize]);
                }
            }
        }
    }
    out
}

/// The common tail: drop resumed global batches, pad with -1 batches, and lay the rows out as
/// `reshape(-1, W, P, R, B).transpose(2, 3, 1, 0, 4)`.
fn finish(planner: &Planner, mut rows: Vec<u64>, drop_first: u64) -> Result<Work, OrderError> {
    let (p, r, w, b) = (
        planner.parallel.nodes,
        planner.parallel.ranks_per_node,
        planner.world.workers_per_rank,
        planner.world.batch_size,
    );
    let gbs = p * r * b;
    let skip = ((drop_first / gbs) * gbs).min(rows.len() as u64) as usize;
    rows.drain(..skip);
    let req = p * r * w * b;
    let cur = rows.len() as u64;
    if cur % req != 0 {
        let needed = req - cur % req;
        let pad_batches = needed / gbs;
        rows.extend(std::iter::repeat_n(PAD, (pad_batches * gbs) as usize));
    }
    let batches = rows.len() as u64 / (w * p * r * b);
    let shape = Shape {
        nodes: p,
        ranks: r,
        workers: w,
        batches,
        batch: b,
    };
    let mut data = vec![PAD; rows.len()];
    for (i, &v) in rows.iter().enumerate() {
        let i = i as u64;
        let slot = i % b;
        let rest = i / b;
        let rank = rest % r;
        let rest = rest / r;
        let node = rest % p;
        let rest = rest / p;
        let worker = rest % w;
        let j = rest / w;
        let at = (((node * r + rank) * w + worker) * batches + j) * b + slot;
        data[at as usize] = v;
    }
    Ok(Work::Dense(Partition::Dense { shape, data }))
}

/// Rows (of `width` ids) that hold no -1.
fn full_rows(rows: &[u64], width: usize) -> usize {
    rows.chunks(width)
        .filter(|c| c.iter().all(|&v| v != PAD))
        .count()
}

/// Reorder whole batches by a shuffled array of stream labels (per_stream and
/// device_per_stream): the k-th label i takes stream i's next batch.
fn interleave_batches(
    rng: &mut NumpyRng,
    per_stream: &[Vec<u64>],
    counts: &[usize],
    width: usize,
) -> Vec<u64> {
    let mut labels: Vec<usize> = counts
        .iter()
        .enumerate()
        .flat_map(|(i, &n)| std::iter::repeat_n(i, n))
        .collect();
    rng.shuffle(&mut labels);
    let mut next = vec![0usize; counts.len()];
    let mut out = Vec::with_capacity(labels.len() * width);
    for l in labels {
        let k = next[l];
        next[l] += 1;
        out.extend_from_slice(&per_stream[l][k * width..(k + 1) * width]);
    }
    out
}

/// Builds the work of the non-random batching methods.
pub fn build(
    planner: &Planner,
    method: BatchingMethod,
    epoch: u64,
    drop_first: u64,
) -> Result<Work, OrderError> {
    let (p, r, b) = (
        planner.parallel.nodes,
        planner.parallel.ranks_per_node,
        planner.world.batch_size,
    );
    let gbs = p * r * b;
    let nstreams = planner.streams.len();
    let epoch_seed = if planner.opts.shuffle
        && planner.opts.sampling_method == super::SamplingMethod::Balanced
    {
        planner.seed.wrapping_add(epoch)
    } else {
        planner.seed
    };
    match method {
        BatchingMethod::Random => unreachable_random(),
        BatchingMethod::Stratified => {
            let mut portions: Vec<i64> = Vec::with_capacity(nstreams);
            let mut parts = Vec::with_capacity(nstreams);
            for s in 0..nstreams {
                portions.push((planner.draws[s].proportion * gbs as f64) as i64);
                let (shape, data) = stream_partition(planner, s, epoch, 1, 1, false)?;
                parts.push(consumption_order(shape, &data));
            }
            let sum: i64 = portions.iter().sum();
            if sum != gbs as i64 {
                let missing = gbs as i64 - sum;
                let leftover: Vec<f64> = (0..nstreams)
                    .map(|s| gbs as f64 * planner.draws[s].proportion - portions[s] as f64)
                    .collect();
                let mut order: Vec<usize> = (0..nstreams).collect();
                order.sort_by(|&a, &b| leftover[a].total_cmp(&leftover[b]));
                order.reverse();
                let n = nstreams as i64;
                let take = if missing >= 0 {
                    missing.min(n)
                } else {
                    (n + missing).max(0)
                };
                for &i in &order[..take as usize] {
                    portions[i] += 1;
                }
            }
            for (s, &portion) in portions.iter().enumerate() {
                if portion <= 0 {
                    return Err(OrderError::StreamBatches {
                        stream: s,
                        reason: format!(
                            "gets {portion} samples of each global batch of {gbs}: increase the global \
                             batch size or the stream's proportion"
                        ),
                    });
                }
            }
            let mut min_rows = usize::MAX;
            let mut padded = Vec::with_capacity(nstreams);
            for (s, mut part) in parts.into_iter().enumerate() {
                let width = portions[s] as usize;
                if part.len() % width != 0 {
                    let extra = width - part.len() % width;
                    part.extend(std::iter::repeat_n(PAD, extra));
                }
                min_rows = min_rows.min(full_rows(&part, width));
                padded.push(part);
            }
            let mut rows = Vec::with_capacity(min_rows * gbs as usize);
            for i in 0..min_rows {
                for (s, part) in padded.iter().enumerate() {
                    let width = portions[s] as usize;
                    rows.extend_from_slice(&part[i * width..(i + 1) * width]);
                }
            }
            finish(planner, rows, drop_first)
        }
        BatchingMethod::PerStream => {
            let width = gbs as usize;
            let mut per_stream = Vec::with_capacity(nstreams);
            let mut counts = Vec::with_capacity(nstreams);
            for s in 0..nstreams {
                let (shape, data) = stream_partition(planner, s, epoch, p, b, false)?;
                let ordered = consumption_order(shape, &data);
                let full = full_rows(&ordered, width);
                if full == 0 {
                    return Err(OrderError::StreamBatches {
                        stream: s,
                        reason: "does not have enough samples to construct a complete global batch"
                            .into(),
                    });
                }
                per_stream.push(ordered[..full * width].to_vec());
                counts.push(full);
            }
            let rows =
                interleave_batches(&mut NumpyRng::new(epoch_seed), &per_stream, &counts, width);
            finish(planner, rows, drop_first)
        }
        BatchingMethod::DevicePerStream => {
            let c = planner.canonical;
            if c % p != 0 {
                return Err(OrderError::DevicePerStreamNodes {
                    canonical: c,
                    physical: p,
                });
            }
            let per_node_cn = c / p;
            let width = b as usize;
            let mut streams = Vec::with_capacity(nstreams);
            for s in 0..nstreams {
                streams.push(stream_partition(planner, s, epoch, c, 1, true)?);
            }
            let mut node_batches: Vec<(Vec<Vec<u64>>, Vec<usize>)> = Vec::with_capacity(p as usize);
            for node in 0..p {
                let mut lists = Vec::with_capacity(nstreams);
                let mut counts = Vec::with_capacity(nstreams);
                for (s, (shape, data)) in streams.iter().enumerate() {
                    let per_node =
                        (shape.ranks * shape.workers * shape.batches * shape.batch) as usize;
                    let lo = (node * per_node_cn) as usize * per_node;
                    let hi = ((node + 1) * per_node_cn) as usize * per_node;
                    let sub = Shape {
                        nodes: per_node_cn,
                        ..*shape
                    };
                    let mut ordered = consumption_order(sub, &data[lo..hi]);
                    let extra = width - ordered.len() % width;
                    ordered.extend(std::iter::repeat_n(PAD, extra));
                    let full = full_rows(&ordered, width);
                    if full == 0 {
                        return Err(OrderError::StreamBatches {
                            stream: s,
                            reason: format!(
                                "does not have enough samples to construct even a single device batch of size {b}"
                            ),
                        });
                    }
                    ordered.truncate(full * width);
                    lists.push(ordered);
                    counts.push(full);
                }
                node_batches.push((lists, counts));
            }
            let devices = (p * r) as usize;
            let mut max_rows = node_batches
                .iter()
                .map(|(_, c)| c.iter().sum::<usize>())
                .max()
                .unwrap_or(0);
            max_rows += devices - max_rows % devices;
            let mut rng = NumpyRng::new(epoch_seed);
            let mut per_node_rows = Vec::with_capacity(p as usize);
            for (lists, counts) in &node_batches {
                let mut rows = interleave_batches(&mut rng, lists, counts, width);
                rows.resize(max_rows * width, PAD);
                per_node_rows.push(rows);
            }
            // np.stack(axis=1).reshape(-1, B): device batch m of node 0, 1, …, then m+1.
            let mut rows = Vec::with_capacity(max_rows * width * p as usize);
            for m in 0..max_rows {
                for node_rows in &per_node_rows {
                    rows.extend_from_slice(&node_rows[m * width..(m + 1) * width]);
                }
            }
            finish(planner, rows, drop_first)
        }
    }
}

fn unreachable_random() -> Result<Work, OrderError> {
    Err(OrderError::NotPositive {
        what: "batching_method (random is built lazily)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct read order of an orig rank equals the DataLoader model over its workers.
    #[test]
    fn orig_fast_path_equals_worker_model() {
        let mut rng = NumpyRng::new(5);
        let mut checked = 0;
        for _ in 0..3000 {
            let mut draw = |lo: i64, hi: i64| rng.integers(lo, hi).unwrap() as u64;
            let (n, c, p, r, w, b) = (
                draw(1, 300),
                draw(1, 9),
                draw(1, 9),
                draw(1, 5),
                draw(1, 4),
                draw(1, 7),
            );
            let d = if draw(0, 2) == 0 {
                0
            } else {
                draw(0, n as i64 + 1)
            };
            let params = crate::order::partition::PartitionParams {
                relaxed: false,
                num_samples: n,
                canonical: c,
                nodes: p,
                ranks: r,
                workers: w,
                batch: b,
                drop_first: d,
                initial_nodes: None,
            };
            let Ok(o) = crate::order::partition::Orig::of(&params) else {
                continue;
            };
            let work = Work::Random {
                partition: Partition::Orig(o),
                shuffle: None,
                map: SampleMap::Identity,
            };
            let s = work.shape();
            for node in 0..s.nodes {
                for rank in 0..s.ranks {
                    let workers: Vec<Vec<u64>> = (0..s.workers)
                        .map(|wk| {
                            let mut v = Vec::new();
                            work.worker_ids(node, rank, wk, &mut v);
                            v.retain(|&x| x != PAD);
                            v
                        })
                        .collect();
                    let model = crate::order::dataloader_order(&workers, b);
                    assert_eq!(
                        work.rank_read_order(node, rank).unwrap(),
                        model,
                        "n={n} c={c} p={p} r={r} w={w} b={b} d={d}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000);
    }

    #[test]
    fn labels_take_batches_in_order() {
        let per_stream = vec![vec![1, 2, 3, 4], vec![10, 11]];
        let out = interleave_batches(&mut NumpyRng::new(1), &per_stream, &[2, 1], 2);
        let mut sorted = out.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 3, 4, 10, 11]);
        let first = out.iter().position(|&v| v == 1).unwrap();
        let second = out.iter().position(|&v| v == 3).unwrap();
        assert!(first < second);
    }
}
