//! numpy's `default_rng(seed)`, bit for bit: `Generator(PCG64(SeedSequence(seed)))`.
//!
//! StreamingDataset derives every order from numpy generators, so matching it means matching
//! numpy's seeding (SeedSequence hashing), PCG64's XSL-RR output, the *buffered* 32-bit draws,
//! and the two different bounded-integer methods numpy uses: masked rejection for
//! `shuffle`/`permutation` (`random_interval`) and Lemire's method for `integers` and `choice`.
//! Sources: numpy `bit_generator.pyx` (SeedSequence), `src/pcg64/pcg64.h`, `_generator.pyx`
//! (shuffle, choice), `src/distributions/distributions.c` (bounded integers, uniform);
//! MDS-SPEC §6 restates them and gives the test vectors checked below.

const MULT_A: u32 = 0x931e_8875;
const INIT_A: u32 = 0x43b0_d7e5;
const MULT_B: u32 = 0x58f3_8ded;
const INIT_B: u32 = 0x8b51_f9dd;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const PCG_MULT: u128 = 0x2360_ED05_1FC6_5DA4_4385_DF64_9FCC_F645;

/// numpy `SeedSequence(seed).generate_state(4, uint64)` for a non-negative integer seed.
fn seed_sequence_state(seed: u64) -> [u64; 4] {
    let mut entropy = vec![seed as u32];
    if seed >> 32 != 0 {
        entropy.push((seed >> 32) as u32);
    }
    let mut hash_const = INIT_A;
    let mut hashmix = |value: u32| -> u32 {
        let mut v = value ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_A);
        v = v.wrapping_mul(hash_const);
        v ^ (v >> 16)
    };
    let mix = |x: u32, y: u32| -> u32 {
        let r = MIX_MULT_L
            .wrapping_mul(x)
            .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
        r ^ (r >> 16)
    };
    let mut pool = [0u32; 4];
    for (i, slot) in pool.iter_mut().enumerate() {
        *slot = hashmix(entropy.get(i).copied().unwrap_or(0));
    }
    for src in 0..4 {
        for dst in 0..4 {
            if src != dst {
                let h = hashmix(pool[src]);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    // (Entropy words beyond the pool size do not occur for a u64 seed.)
    let mut words = [0u32; 8];
    let mut h = INIT_B;
    for (i, w) in words.iter_mut().enumerate() {
        let mut v = pool[i % 4] ^ h;
        h = h.wrapping_mul(MULT_B);
        v = v.wrapping_mul(h);
        *w = v ^ (v >> 16);
    }
    let mut out = [0u64; 4];
    for (k, o) in out.iter_mut().enumerate() {
        *o = u64::from(words[2 * k]) | (u64::from(words[2 * k + 1]) << 32);
    }
    out
}

/// A numpy `Generator(PCG64(SeedSequence(seed)))`: the same draws, in the same order.
#[derive(Debug, Clone)]
pub struct NumpyRng {
    state: u128,
    inc: u128,
    /// The unused upper half of the last 64-bit draw, kept for the next 32-bit draw (numpy's
    /// `uinteger`), valid when `has_spare` (numpy's `has_uint32`).
    spare_u32: u32,
    has_spare: bool,
}

impl NumpyRng {
    /// `numpy.random.default_rng(seed)`.
    pub fn new(seed: u64) -> Self {
        let s = seed_sequence_state(seed);
        let initstate = (u128::from(s[0]) << 64) | u128::from(s[1]);
        let initseq = (u128::from(s[2]) << 64) | u128::from(s[3]);
        let mut rng = NumpyRng {
            state: 0,
            inc: (initseq << 1) | 1,
            spare_u32: 0,
            has_spare: false,
        };
        rng.step();
        rng.state = rng.state.wrapping_add(initstate);
        rng.step();
        rng
    }

    #[inline]
    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    /// Next raw 64-bit output (XSL-RR).
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let hi = (self.state >> 64) as u64;
        let lo = self.state as u64;
        (hi ^ lo).rotate_right((hi >> 58) as u32)
    }

    /// Next 32-bit output: the stored upper half of a previous draw if any, else the low half
    /// of a fresh 64-bit draw (whose upper half is stored).
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        if self.has_spare {
            self.has_spare = false;
            return self.spare_u32;
        }
        let x = self.next_u64();
        self.spare_u32 = (x >> 32) as u32;
        self.has_spare = true;
        x as u32
    }

    /// Next double in [0, 1): 53 random bits.
    #[inline]
    pub fn next_double(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }

    /// numpy `random_interval(max)`: uniform in [0, max] by masked rejection (used by shuffle).
    #[inline]
    pub fn interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mask = u64::MAX >> max.leading_zeros();
        if max <= u64::from(u32::MAX) {
            loop {
                let v = u64::from(self.next_u32()) & mask;
                if v <= max {
                    return v;
                }
            }
        } else {
            loop {
                let v = self.next_u64() & mask;
                if v <= max {
                    return v;
                }
            }
        }
    }

    /// numpy `random_bounded_uint64(off=0, rng)` with Lemire's method: uniform in [0, rng]
    /// (used by `integers` and `choice`).
    #[inline]
    pub fn bounded_lemire(&mut self, rng: u64) -> u64 {
        if rng == 0 {
            0
        } else if rng < u64::from(u32::MAX) {
            let ex = rng as u32 + 1;
            let mut m = u64::from(self.next_u32()) * u64::from(ex);
            let mut left = m as u32;
            if left < ex {
                let threshold = (u32::MAX - rng as u32) % ex;
                while left < threshold {
                    m = u64::from(self.next_u32()) * u64::from(ex);
                    left = m as u32;
                }
            }
            m >> 32
        } else if rng == u64::from(u32::MAX) {
            u64::from(self.next_u32())
        } else if rng == u64::MAX {
            self.next_u64()
        } else {
            let ex = rng + 1;
            let mut m = u128::from(self.next_u64()) * u128::from(ex);
            let mut left = m as u64;
            if left < ex {
                let threshold = (u64::MAX - rng) % ex;
                while left < threshold {
                    m = u128::from(self.next_u64()) * u128::from(ex);
                    left = m as u64;
                }
            }
            (m >> 64) as u64
        }
    }

    /// `integers(low, high)` (int64, high exclusive) for `low < high`; `None` when numpy would
    /// raise `ValueError: low >= high`.
    pub fn integers(&mut self, low: i64, high: i64) -> Option<i64> {
        if low >= high {
            return None;
        }
        let range = (high as i128 - 1 - low as i128) as u64;
        Some((low as i128 + self.bounded_lemire(range) as i128) as i64)
    }

    /// `shuffle(x)` for a list or 1-D array: Fisher–Yates from the end with masked bounds.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        let n = x.len();
        for i in (1..n).rev() {
            let j = self.interval(i as u64) as usize;
            x.swap(i, j);
        }
    }

    /// `permutation(n)`.
    pub fn permutation(&mut self, n: u64) -> Vec<u64> {
        let mut v: Vec<u64> = (0..n).collect();
        self.shuffle(&mut v);
        v
    }

    /// `uniform(low, high)`: one value, `low + (high - low) * next_double` (no FMA, as numpy's
    /// x86-64 build).
    #[inline]
    pub fn uniform(&mut self, low: f64, range: f64) -> f64 {
        low + range * self.next_double()
    }

    /// `choice(n, k, replace=False)` (shuffle=True): the tail-shuffle branch when
    /// `n > 10000 and k > n // 50`, otherwise Floyd's algorithm followed by a shuffle; both
    /// with Lemire bounds. `None` when numpy would raise (k > n).
    pub fn choice_without_replacement(&mut self, n: u64, k: u64) -> Option<Vec<u64>> {
        if k > n {
            return None;
        }
        if n > 10_000 && k > n / 50 {
            let mut idx: Vec<u64> = (0..n).collect();
            let first = (n - k).max(1);
            for i in (first..n).rev() {
                let j = self.bounded_lemire(i) as usize;
                idx.swap(i as usize, j);
            }
            return Some(idx.split_off((n - k) as usize));
        }
        let mut out = Vec::with_capacity(k as usize);
        let mut seen = std::collections::HashSet::with_capacity(k as usize);
        for j in (n - k)..n {
            let v = self.bounded_lemire(j);
            let pick = if seen.insert(v) { v } else { j };
            if pick == j {
                seen.insert(j);
            }
            out.push(pick);
        }
        for i in (1..out.len()).rev() {
            let j = self.bounded_lemire(i as u64) as usize;
            out.swap(i, j);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_state_matches_numpy() {
        assert_eq!(
            seed_sequence_state(9176),
            [
                0x843c62eb0dd64448,
                0xfd951d81e345305f,
                0x81ddf06a9fa2424c,
                0x015c41789371fd9b
            ]
        );
    }

    #[test]
    fn raw_outputs_match_numpy() {
        let mut r = NumpyRng::new(9176);
        assert_eq!(r.next_u64(), 0xce488e5ff4c10304);
        assert_eq!(r.next_u64(), 0x233a25e3fe3960b0);
    }

    #[test]
    fn permutation_matches_numpy() {
        assert_eq!(
            NumpyRng::new(9176).permutation(10),
            vec![8, 1, 2, 7, 5, 6, 9, 3, 0, 4]
        );
    }

    #[test]
    fn integers_match_numpy() {
        let mut r = NumpyRng::new(9176);
        let v: Vec<i64> = (0..3)
            .map(|_| r.integers(196_608, 327_680).unwrap())
            .collect();
        assert_eq!(v, vec![321_922, 302_225, 326_770]);
        assert_eq!(r.integers(5, 5), None);
    }

    #[test]
    fn choice_matches_numpy() {
        let mut r = NumpyRng::new(9176);
        assert_eq!(
            r.choice_without_replacement(100, 5).unwrap(),
            vec![20, 78, 97, 91, 13]
        );
        assert_eq!(r.choice_without_replacement(3, 4), None);
    }

    #[test]
    fn uniform_matches_numpy() {
        let mut r = NumpyRng::new(9176);
        assert_eq!(r.uniform(0.0, 1.0), 0.8057946190135716);
        assert_eq!(r.uniform(0.0, 1.0), 0.1376060182212533);
    }

    // Vectors below were produced by numpy 2.4.6 (`numpy.random.default_rng`).

    #[test]
    fn choice_tail_shuffle_branch_matches_numpy() {
        // n > 10000 and k > n // 50: tail Fisher–Yates with Lemire bounds.
        let c = NumpyRng::new(9176)
            .choice_without_replacement(20_000, 1000)
            .unwrap();
        assert_eq!(&c[..5], &[14588, 3615, 2131, 3219, 4352]);
        assert_eq!(&c[997..], &[19859, 16115, 19121]);
        assert_eq!(c.iter().sum::<u64>(), 10_391_522);
    }

    #[test]
    fn wide_integer_ranges_match_numpy() {
        let mut r = NumpyRng::new(1);
        let v: Vec<i64> = (0..3).map(|_| r.integers(0, 1 << 40).unwrap()).collect();
        assert_eq!(v, vec![562_753_827_705, 1_045_045_885_889, 158_505_170_440]);
        let mut r = NumpyRng::new(1);
        let v: Vec<i64> = (0..3).map(|_| r.integers(0, 1 << 32).unwrap()).collect();
        assert_eq!(v, vec![2_032_329_983, 2_198_257_139, 3_243_419_750]);
    }

    #[test]
    fn other_seeds_match_numpy() {
        assert_eq!(
            NumpyRng::new(0).permutation(10),
            vec![4, 6, 2, 7, 3, 5, 9, 0, 8, 1]
        );
        assert_eq!(
            NumpyRng::new((1 << 40) + 5).permutation(10),
            vec![8, 1, 2, 5, 3, 0, 9, 7, 4, 6]
        );
    }

    #[test]
    fn u32_buffer_survives_double_draws() {
        let mut r = NumpyRng::new(9176);
        assert_eq!(r.integers(0, 10), Some(9));
        assert_eq!(r.uniform(0.0, 1.0), 0.1376060182212533);
        assert_eq!(r.integers(0, 10), Some(8));
        assert_eq!(r.integers(0, 10), Some(2));
    }
}
