//! upstream `partition/orig.py` (MDS-SPEC §5.4) as arithmetic: canonical rows of consecutive
//! ids, read column by column into the global sequence T, dealt to nodes, then ranks, then
//! workers in batches. Every element is a closed-form function of its coordinates.

use super::{Shape, PAD};
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
    /// upstream `get_partitions_orig(num_samples, C, P, R, W, B, drop_first)`.
    pub fn new(
        n: u64,
        c: u64,
        p: u64,
        r: u64,
        w: u64,
        b: u64,
        drop: u64,
    ) -> Result<Self, OrderError> {
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
        let col = if self.pad != 0 && col >= self.s {
            if self.pad_broadcast {
                self.pad_src
            } else {
                self.pad_src + (col - self.s)
            }
        } else {
            col
        };
        let start = row * self.n / self.c;
        let mut v = start + col;
        if col == self.s - 1 {
            let stop = (row + 1) * self.n / self.c;
            if stop - start < self.s {
                v -= 1;
            }
        }
        v
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
