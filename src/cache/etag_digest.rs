//! `EtagDigest`: the MD5 an S3 ETag is compared with, computed while a download in parts
//! arrives.
//!
//! A shard index.json lists no hash for (MDSWriter's default) is checked by the store's
//! ETag: the MD5 of the object, or for a multipart upload the MD5 of its parts' MD5s. MD5 is
//! serial and slow (~800 MB/s on the bench machine), so hashing a 64 MiB shard after its last
//! byte arrives adds ~80 ms before the shard's first sample can be served. Fed each part as
//! soon as the parts before it are in, the digest is nearly done when the download is.
//!
//! A multipart ETag can only be computed ahead when the upload's part size is known: the one
//! that matched this dataset's ETags before, else the usual 8 MiB. When it is not that
//! size, the check after the download searches the others (see `multipart_part_size`).

use crate::store::EtagMd5s;
use md5::{Digest, Md5};

/// The part size uploaders use by default (aws CLI, boto3), tried when none matched yet.
const DEFAULT_UPLOAD_PART: u64 = 8 << 20;

/// An ETag digest fed in order, for an object of known length.
pub struct EtagDigest {
    len: u64,
    learned_part: u64,
    state: State,
}

enum State {
    /// No bytes yet: the first part's ETag says what to compute.
    Undecided,
    /// A plain MD5 ETag.
    Plain(Md5),
    /// A multipart ETag, hashed with upload parts of `part` bytes.
    Multipart {
        part: u64,
        outer: Md5,
        current: Md5,
        in_current: u64,
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

    /// Feeds the object's next `bytes` (in order, each once); `tag` is the ETag the
    /// download's parts carry.
    pub fn update(&mut self, tag: &EtagMd5s, bytes: &[u8]) {
        if let State::Undecided = self.state {
            self.state = self.decide(tag);
        }
        match &mut self.state {
            State::Plain(h) => h.update(bytes),
            State::Multipart {
                part,
                outer,
                current,
                in_current,
            } => {
                let mut rest = bytes;
                while !rest.is_empty() {
                    let room = usize::try_from(*part - *in_current).unwrap_or(usize::MAX);
                    let (now, later) = rest.split_at(room.min(rest.len()));
                    current.update(now);
                    *in_current += now.len() as u64;
                    if *in_current == *part {
                        outer.update(current.finalize_reset());
                        *in_current = 0;
                    }
                    rest = later;
                }
            }
            State::Undecided | State::Off => {}
        }
    }

    /// The digest of every byte fed (call once the whole object was fed).
    pub fn finish(self) -> Streamed {
        match self.state {
            State::Plain(h) => Streamed {
                md5: Some(h.finalize().into()),
                multipart: None,
            },
            State::Multipart {
                part,
                mut outer,
                current,
                in_current,
            } => {
                if in_current > 0 {
                    outer.update(current.finalize());
                }
                Streamed {
                    md5: None,
                    multipart: Some((part, outer.finalize().into())),
                }
            }
            State::Undecided | State::Off => Streamed::default(),
        }
    }

    fn decide(&self, tag: &EtagMd5s) -> State {
        match tag {
            (Some(_), _) => State::Plain(Md5::new()),
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
                        outer: Md5::new(),
                        current: Md5::new(),
                        in_current: 0,
                    },
                    None => State::Off,
                }
            }
            (None, None) => State::Off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 253) as u8).collect()
    }

    /// Feeds `bytes` in pieces of `piece` bytes.
    fn fed(mut d: EtagDigest, tag: &EtagMd5s, bytes: &[u8], piece: usize) -> Streamed {
        for p in bytes.chunks(piece) {
            d.update(tag, p);
        }
        d.finish()
    }

    #[test]
    fn a_plain_etag_gets_the_object_s_md5_however_the_parts_are_cut() {
        let bytes = object(10_000);
        let tag = (Some([1; 16]), None);
        let want: [u8; 16] = Md5::digest(&bytes).into();
        for piece in [1, 999, 4096, 10_000] {
            let got = fed(EtagDigest::new(10_000, 0), &tag, &bytes, piece);
            assert_eq!(got.md5, Some(want), "pieces of {piece}");
            assert_eq!(got.multipart, None);
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
        // Download parts that do not line up with the upload's.
        for piece in [1, 300, 1000, 1700, 3_500] {
            let got = fed(EtagDigest::new(3_500, part), &tag, &bytes, piece);
            assert_eq!(got.multipart, Some((part, want)), "pieces of {piece}");
        }
        // A learned size that cannot give 4 parts: the default 8 MiB cannot either, so
        // nothing is computed ahead (the check after the download searches).
        let got = fed(EtagDigest::new(3_500, 500), &tag, &bytes, 700);
        assert_eq!(got, Streamed::default());
    }

    #[test]
    fn the_default_upload_part_size_is_tried_when_none_was_learned() {
        let len = (8 << 20) + 5;
        let got = fed(
            EtagDigest::new(len as u64, 0),
            &(None, Some(([0; 16], 2))),
            &object(len),
            1 << 20,
        );
        assert_eq!(got.multipart.map(|(p, _)| p), Some(8 << 20));
        // No ETag MD5 at all: nothing.
        let got = fed(EtagDigest::new(10, 0), &(None, None), &object(10), 3);
        assert_eq!(got, Streamed::default());
    }
}
