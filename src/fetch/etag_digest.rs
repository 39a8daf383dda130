//! `EtagDigest`: the MD5 an S3 ETag is compared with, computed while a download in parts
//! arrives.
//!
//! A shard index.json lists no hash for (MDSWriter's default) is checked by the store's
//! ETag: the MD5 of the object, or for a multipart upload the MD5 of its parts' MD5s. MD5 is
//! serial and slow (~800 MB/s on the bench machine), so hashing a 64 MiB shard after its last
//! byte arrives adds ~80 ms before the shard's first sample can be served.
//!
//! - A plain MD5 ETag is fed the object in order, each part as soon as the parts before it
//!   are in; what is left when the last part lands is hashed then.
//! - A multipart ETag is a list of independent MD5s, one per upload part: every upload part
//!   that lies whole inside a downloaded part is hashed as soon as that part lands, in any
//!   order, and those still missing at the end (the last part's, and any that straddle two
//!   downloaded parts) are hashed side by side on several threads. With download parts of the
//!   upload's size (8 MiB both by default) only the last part to land is left.
//!
//! A multipart ETag can only be computed ahead when the upload's part size is known: the one
//! that matched this dataset's ETags before, else the usual 8 MiB. When it is not that
//! size, the check after the download searches the others (see `multipart_part_size`).

use crate::store::EtagMd5s;
use md5::{Digest, Md5};

/// The part size uploaders use by default (aws CLI, boto3), tried when none matched yet.
const DEFAULT_UPLOAD_PART: u64 = 8 << 20;

/// An ETag digest of an object of known length, fed while the object lands.
pub struct EtagDigest {
    len: u64,
    learned_part: u64,
    state: State,
}

enum State {
    /// No bytes yet: the first part's ETag says what to compute.
    Undecided,
    /// A plain MD5 ETag, fed the first `fed` bytes so far.
    Plain { hash: Md5, fed: u64 },
    /// A multipart ETag with upload parts of `part` bytes: the MD5 of each one hashed so far.
    Multipart {
        part: u64,
        sums: Vec<Option<[u8; 16]>>,
    },
    /// Nothing to compute ahead (no ETag MD5, or no upload part size that fits).
    Off,
}

/// What an [`EtagDigest`] computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Streamed {
    /// The object's MD5 (for a plain MD5 ETag).
    pub md5: Option<[u8; 16]>,
    /// The upload part size and the MD5 of the parts' MD5s (for a multipart ETag).
    pub multipart: Option<(u64, [u8; 16])>,
}

impl EtagDigest {
    /// A digest for an object of `len` bytes; `learned_part` is the upload part size that
    /// matched a multipart ETag of this dataset before (0: none).
    pub fn new(len: u64, learned_part: u64) -> Self {
        Self {
            len,
            learned_part,
            state: State::Undecided,
        }
    }

    /// A downloaded part landed: `bytes` from byte `at` of the object (parts land in any
    /// order, each once); `tag` is the ETag the download's parts carry. Hashes the upload parts
    /// of a multipart ETag that lie whole inside it.
    pub fn landed(&mut self, tag: &EtagMd5s, at: u64, bytes: &[u8]) {
        self.decide_once(tag);
        let State::Multipart { part, sums } = &mut self.state else {
            return;
        };
        let part = *part;
        let end = at.saturating_add(bytes.len() as u64);
        for k in at.div_ceil(part)..sums.len() as u64 {
            let from = k * part;
            let to = from.saturating_add(part).min(self.len);
            if to > end {
                break;
            }
            let piece = usize::try_from(from - at)
                .ok()
                .zip(usize::try_from(to - at).ok())
                .and_then(|(a, b)| bytes.get(a..b));
            if let (Some(piece), Some(slot)) = (piece, sums.get_mut(k as usize)) {
                *slot = Some(Md5::digest(piece).into());
            }
        }
    }

    /// The object's next `bytes` in order (each once, from byte 0 on); `tag` is the ETag the
    /// download's parts carry. Feeds the MD5 of a plain ETag.
    pub fn in_order(&mut self, tag: &EtagMd5s, bytes: &[u8]) {
        self.decide_once(tag);
        if let State::Plain { hash, fed } = &mut self.state {
            hash.update(bytes);
            *fed += bytes.len() as u64;
        }
    }

    /// The digest, given the whole object `whole` (its `len` bytes): what was not hashed while
    /// it landed is hashed now, a multipart ETag's missing parts on up to `threads` threads.
    /// `tag` decides what to compute when nothing was fed.
    pub fn finish(mut self, tag: &EtagMd5s, whole: &[u8], threads: usize) -> Streamed {
        self.decide_once(tag);
        match self.state {
            State::Plain { mut hash, fed } => {
                if let Some(rest) = usize::try_from(fed).ok().and_then(|f| whole.get(f..)) {
                    hash.update(rest);
                }
                Streamed {
                    md5: Some(hash.finalize().into()),
                    multipart: None,
                }
            }
            State::Multipart { part, mut sums } => {
                hash_missing_parts(&mut sums, part, whole, threads.max(1));
                let mut outer = Md5::new();
                for sum in &sums {
                    match sum {
                        Some(s) => outer.update(s),
                        // `whole` is shorter than the object: no digest.
                        None => return Streamed::default(),
                    }
                }
                Streamed {
                    md5: None,
                    multipart: Some((part, outer.finalize().into())),
                }
            }
            State::Undecided | State::Off => Streamed::default(),
        }
    }

    fn decide_once(&mut self, tag: &EtagMd5s) {
        if let State::Undecided = self.state {
            self.state = self.decide(tag);
        }
    }

    fn decide(&self, tag: &EtagMd5s) -> State {
        match tag {
            (Some(_), _) => State::Plain {
                hash: Md5::new(),
                fed: 0,
            },
            (None, Some((_, parts))) => {
                let n = u64::from((*parts).max(1));
                // `n` parts of this size cover the object and `n - 1` do not.
                let fits = |p: u64| {
                    p > 0 && p.saturating_mul(n) >= self.len && p.saturating_mul(n - 1) < self.len
                };
                match [self.learned_part, DEFAULT_UPLOAD_PART]
                    .into_iter()
                    .find(|&p| fits(p))
                {
                    Some(part) => State::Multipart {
                        part,
                        sums: vec![None; usize::try_from(n).unwrap_or(0)],
                    },
                    None => State::Off,
                }
            }
            (None, None) => State::Off,
        }
    }
}

/// Hashes the upload parts of `whole` (of `part` bytes) whose MD5 is still missing in `sums`,
/// spread over up to `threads` threads (this one included).
fn hash_missing_parts(sums: &mut [Option<[u8; 16]>], part: u64, whole: &[u8], threads: usize) {
    let Ok(part) = usize::try_from(part) else {
        return;
    };
    let part = part.max(1);
    let hash_all = |jobs: &mut [(&mut Option<[u8; 16]>, &[u8])]| {
        for (sum, bytes) in jobs.iter_mut() {
            **sum = Some(Md5::digest(bytes).into());
        }
    };
    {
        let mut missing: Vec<(&mut Option<[u8; 16]>, &[u8])> = sums
            .iter_mut()
            .zip(whole.chunks(part))
            .filter(|(sum, _)| sum.is_none())
            .collect();
        let per_thread = missing
            .len()
            .div_ceil(threads.clamp(1, missing.len().max(1)));
        std::thread::scope(|s| {
            let mut chunks = missing.chunks_mut(per_thread.max(1));
            let here = chunks.next();
            for jobs in chunks {
                let spawned = std::thread::Builder::new()
                    .name("etag-md5".into())
                    .spawn_scoped(s, move || hash_all(jobs));
                if let Err(e) = spawned {
                    tracing::debug!(error = %e, "cannot start a thread to hash parts");
                }
            }
            if let Some(jobs) = here {
                hash_all(jobs);
            }
        });
    }
    // Parts of a thread that could not start.
    for (sum, bytes) in sums.iter_mut().zip(whole.chunks(part)) {
        if sum.is_none() {
            *sum = Some(Md5::digest(bytes).into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 253) as u8).collect()
    }

    /// Lands `bytes` in pieces of `piece` bytes, the last `held_back` pieces kept for
    /// `finish` (as a download's last part is), the others landed in reverse order and fed
    /// in order as a download in parts does.
    fn fed(
        mut d: EtagDigest,
        tag: &EtagMd5s,
        bytes: &[u8],
        piece: usize,
        held_back: usize,
    ) -> Streamed {
        let pieces: Vec<(usize, &[u8])> = bytes
            .chunks(piece)
            .enumerate()
            .map(|(i, p)| (i * piece, p))
            .collect();
        let landed = pieces.len().saturating_sub(held_back);
        for &(at, p) in pieces[..landed].iter().rev() {
            d.landed(tag, at as u64, p);
        }
        for &(_, p) in &pieces[..landed] {
            d.in_order(tag, p);
        }
        d.finish(tag, bytes, 3)
    }

    #[test]
    fn a_plain_etag_gets_the_object_s_md5_however_the_parts_are_cut() {
        let bytes = object(10_000);
        let tag = (Some([1; 16]), None);
        let want: [u8; 16] = Md5::digest(&bytes).into();
        for piece in [1, 999, 4096, 10_000] {
            for held_back in [0, 1, 3] {
                let got = fed(EtagDigest::new(10_000, 0), &tag, &bytes, piece, held_back);
                assert_eq!(got.md5, Some(want), "pieces of {piece}");
                assert_eq!(got.multipart, None);
            }
        }
    }

    #[test]
    fn a_multipart_etag_gets_the_md5_of_the_upload_parts_md5s() {
        let part = 1000u64;
        let bytes = object(3_500);
        let mut outer = Md5::new();
        for p in bytes.chunks(part as usize) {
            outer.update(Md5::digest(p));
        }
        let want: [u8; 16] = outer.finalize().into();
        let tag = (None, Some(([2; 16], 4)));
        // Download parts that line up with the upload's or not, landed in any order, some
        // or all of them left for the end.
        for piece in [1, 300, 1000, 1700, 2000, 3_500] {
            for held_back in [0, 1, 2, 100] {
                let got = fed(EtagDigest::new(3_500, part), &tag, &bytes, piece, held_back);
                assert_eq!(got.multipart, Some((part, want)), "pieces of {piece}");
            }
        }
        // A learned size that cannot give 4 parts: the default 8 MiB cannot either, so
        // nothing is computed ahead (the check after the download searches).
        let got = fed(EtagDigest::new(3_500, 500), &tag, &bytes, 700, 0);
        assert_eq!(got, Streamed::default());
    }

    #[test]
    fn upload_parts_inside_a_landed_part_are_hashed_when_it_lands() {
        let bytes = object(3_500);
        let tag = (None, Some(([2; 16], 4)));
        let mut d = EtagDigest::new(3_500, 1000);
        // Bytes 1,500..3,500 hold upload parts 2 and 3 whole, part 1 only in half.
        d.landed(&tag, 1_500, &bytes[1_500..]);
        let State::Multipart { sums, .. } = &d.state else {
            panic!("a multipart digest");
        };
        let done: Vec<bool> = sums.iter().map(Option::is_some).collect();
        assert_eq!(done, [false, false, true, true]);
        // Only parts 0 and 1 are hashed at the end, from the buffer given then: with bytes 10
        // and 2,500 changed there, the digest is of its parts 0 and 1 and the landed 2 and 3.
        let mut other = bytes.clone();
        other[10] ^= 1;
        other[2_500] ^= 1;
        let mut outer = Md5::new();
        for p in [
            &other[..1000],
            &other[1000..2000],
            &bytes[2000..3000],
            &bytes[3000..],
        ] {
            outer.update(Md5::digest(p));
        }
        let want: [u8; 16] = outer.finalize().into();
        assert_eq!(d.finish(&tag, &other, 2).multipart, Some((1000, want)));
        // A whole shorter than the object: no digest rather than a wrong one.
        let short = EtagDigest::new(3_500, 1000).finish(&tag, &bytes[..3_000], 2);
        assert_eq!(short, Streamed::default());
    }

    #[test]
    fn the_default_upload_part_size_is_tried_when_none_was_learned() {
        let len = (8 << 20) + 5;
        let got = fed(
            EtagDigest::new(len as u64, 0),
            &(None, Some(([0; 16], 2))),
            &object(len),
            1 << 20,
            1,
        );
        assert_eq!(got.multipart.map(|(p, _)| p), Some(8 << 20));
        // No ETag MD5 at all: nothing.
        let got = fed(EtagDigest::new(10, 0), &(None, None), &object(10), 3, 0);
        assert_eq!(got, Streamed::default());
    }
}
