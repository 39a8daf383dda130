//! upstream `partition/orig.py` (MDS-SPEC §5.4) as arithmetic: canonical rows of consecutive
//! ids, read column by column into the global sequence T, dealt to nodes, then ranks, then
//! workers in batches. Every element is a closed-form function of its coordinates.

use super::{PartitionParams, Shape, PAD};
use crate::order::OrderError;

/// An `orig` partition.
#[derive(Debug, Clone)]
pub struct Orig {
    n: u64,
    c: u64,
    p: u64,
    r: u64,
    w: u64,
    b: u64,
    drop: u64,
    /// Samples per canonical row before padding (S).
    s: u64,
    /// Padding per row when C < P.
    pad: u64,
    /// Padded row length S'.
    sp: u64,
    degenerate: bool,
    /// Where the pad columns copy from (first column), and whether it is one column broadcast.
    pad_src: u64,
    pad_broadcast: bool,
    /// Per-node sequence length before rank padding (M), and the rank padding rule.
    m: u64,
    rank_extra: u64,
    extra_cyclic: bool,
    /// Per-rank length (L) and batches per worker.
    per_rank: u64,
    batches: u64,
}

impl Orig {
    /// upstream `get_partitions_orig(num_samples, C, P, R, W, B, drop_first)` of `params`
    /// (its algorithm and `initial_nodes` aside).
    pub fn of(params: &PartitionParams) -> Result<Self, OrderError> {
        let (n, c, p) = (params.num_samples, params.canonical, params.nodes);
        let (r, w, b) = (params.ranks, params.workers, params.batch);
        let drop = params.drop_first;
        for (v, what) in [
            (c, "num_canonical_nodes"),
            (p, "nodes"),
            (r, "ranks_per_node"),
            (w, "workers"),
            (b, "batch_size"),
            (n, "epoch size"),
        ] {
            if v == 0 {
                return Err(OrderError::NotPositive { what });
            }
        }
        if (c < p && p % c != 0) || (p < c && c % p != 0) {
            return Err(OrderError::NodesNotDivisible {
                canonical: c,
                physical: p,
            });
        }
        let drop = drop - drop % p;
        let s = n.div_ceil(c);
        let (ratio, pad) = if c < p {
            let k = p / c;
            let overflow = s % k;
            (k, if overflow != 0 { k - overflow } else { 0 })
        } else {
            (0, 0)
        };
        let sp = s + pad;
        let total = c
            .checked_mul(sp)
            .ok_or(OrderError::Overflow("canonical rows"))?;
        let degenerate = !(n > c || (n == c && c >= p));
        // numpy slice ids[:, -2pad-k+1 : -pad-k+1] of a row of length S'.
        let (mut pad_src, mut pad_broadcast) = (0, false);
        if pad != 0 && !degenerate {
            let norm = |neg: u64| sp.saturating_sub(neg);
            let start = norm(2 * pad + ratio - 1);
            let end = norm(pad + ratio - 1).max(start);
            let len = end - start;
            if len == pad {
                pad_src = start;
            } else if len == 1 {
                pad_src = start;
                pad_broadcast = true;
            } else {
                return Err(OrderError::TooFewSamplesToPad {
                    per_canonical: s,
                    ratio,
                });
            }
        }
        let after_drop = total.saturating_sub(drop);
        let m = after_drop / p;
        let overflow = m % r;
        let (rank_extra, extra_cyclic) = if overflow != 0 {
            let u = r - overflow;
            (u, r + u - 1 > m)
        } else {
            (0, false)
        };
        let per_rank = (m + rank_extra) / r;
        let wb = w * b;
        let batches = per_rank.div_ceil(wb);
        Ok(Orig {
            n,
            c,
            p,
            r,
            w,
            b,
            drop,
            s,
            pad,
            sp,
            degenerate,
            pad_src,
            pad_broadcast,
            m,
            rank_extra,
            extra_cyclic,
            per_rank,
            batches,
        })
    }

    /// The array's shape.
    pub fn shape(&self) -> Shape {
        Shape {
            nodes: self.p,
            ranks: self.r,
            workers: self.w,
            batches: self.batches,
            batch: self.b,
        }
    }

    /// Canonical matrix element (row, col), col < S'.
    #[inline]
    fn matrix(&self, row: u64, col: u64) -> u64 {
        if self.degenerate {
            return (row * self.sp + col) % self.n;
        }
        let col = self.source_col(col);
        let (start, short) = self.row_start(row);
        let mut v = start + col;
        if col == self.s - 1 && short {
            v -= 1;
        }
        v
    }

    /// The column a matrix column takes its value from: itself, or for the padding columns
    /// past S (step 3 of MDS-SPEC §5.4) the earlier column they copy.
    #[inline]
    fn source_col(&self, col: u64) -> u64 {
        if self.pad == 0 || col < self.s {
            col
        } else if self.pad_broadcast {
            self.pad_src
        } else {
            self.pad_src + (col - self.s)
        }
    }

    /// First id of canonical row `row`, and whether the row is shorter than S.
    #[inline]
    fn row_start(&self, row: u64) -> (u64, bool) {
        let start = (u128::from(row) * u128::from(self.n) / u128::from(self.c)) as u64;
        let stop = (u128::from(row + 1) * u128::from(self.n) / u128::from(self.c)) as u64;
        (start, stop - start < self.s)
    }

    /// Appends a rank's sequence (its real slots, in read order, without the trailing -1
    /// padding) to `out`. Upstream's DataLoader reads an `orig` rank exactly in this order:
    /// padding only ever trails, so worker batches interleave back into the sequence.
    ///
    /// The sequence walks T with stride P·R, so rows and columns advance incrementally; this
    /// is the hot loop of plan generation.
    pub fn rank_sequence(&self, node: u64, rank: u64, out: &mut Vec<u64>) {
        out.reserve(self.per_rank as usize);
        // Slots whose node-sequence index is below M come straight from T.
        let main = if rank < self.m {
            ((self.m - rank - 1) / self.r + 1).min(self.per_rank)
        } else {
            0
        };
        const MAX_TABLE: u64 = 1 << 22;
        if self.degenerate || self.c > MAX_TABLE {
            for i in 0..main {
                out.push(self.rank_seq(node, rank, i));
            }
        } else {
            let rows: Vec<(u64, bool)> = (0..self.c).map(|r| self.row_start(r)).collect();
            let t0 = node + self.p * rank + self.drop;
            let stride = self.p * self.r;
            let (row_step, col_step) = (stride % self.c, stride / self.c);
            let (mut row, mut col) = (t0 % self.c, t0 / self.c);
            let last = self.s - 1;
            for _ in 0..main {
                let c = self.source_col(col);
                let (start, short) = rows[row as usize];
                out.push(start + c - u64::from(c == last && short));
                row += row_step;
                col += col_step;
                if row >= self.c {
                    row -= self.c;
                    col += 1;
                }
            }
        }
        for i in main..self.per_rank {
            out.push(self.rank_seq(node, rank, i));
        }
    }

    /// Element t of the global sequence T (after dropping).
    #[inline]
    fn global(&self, t: u64) -> u64 {
        let t = t + self.drop;
        self.matrix(t % self.c, t / self.c)
    }

    /// Element i of node p's sequence, rank padding included.
    #[inline]
    fn node_seq(&self, node: u64, i: u64) -> u64 {
        let i = if i < self.m {
            i
        } else {
            let q = i - self.m;
            if self.extra_cyclic {
                q % self.m
            } else {
                self.m + 1 + q - self.r - self.rank_extra
            }
        };
        self.global(node + self.p * i)
    }

    /// Element i of a rank's padded sequence.
    #[inline]
    fn rank_seq(&self, node: u64, rank: u64, i: u64) -> u64 {
        if i < self.per_rank {
            self.node_seq(node, rank + self.r * i)
        } else {
            PAD
        }
    }

    /// Element `[node][rank][worker][batch][slot]`.
    #[inline]
    pub fn get(&self, node: u64, rank: u64, worker: u64, batch: u64, slot: u64) -> u64 {
        self.rank_seq(node, rank, (batch * self.w + worker) * self.b + slot)
    }

    /// `ids[node][rank][worker].flatten()` appended to `out`.
    pub fn worker_slots(&self, node: u64, rank: u64, worker: u64, out: &mut Vec<u64>) {
        out.reserve((self.batches * self.b) as usize);
        for j in 0..self.batches {
            let base = (j * self.w + worker) * self.b;
            for s in 0..self.b {
                out.push(self.rank_seq(node, rank, base + s));
            }
        }
    }
}
