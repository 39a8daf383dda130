//! The store's own check of a download of a shard index.json lists no hash for (MDSWriter's
//! default): its checksum headers (GCS, Azure, full-object S3 CRC32C), else the ETag's MD5,
//! plain or multipart (then at which part size), else the checksum S3 keeps of the object,
//! asked for only when the ETag settles nothing (SSE-KMS, SSE-C, an unusual part size).

use super::error::Rejected;
use super::etag_digest::Streamed;
use super::Fetcher;
use crate::store::{self, ObjectKey};
use md5::Digest;

/// Part sizes S3 uploaders use (aws CLI and boto3 default to 8 MiB), tried in this order after
/// the one that matched last.
const USUAL_PART_SIZES_MIB: [u64; 12] = [8, 16, 5, 10, 15, 32, 50, 64, 100, 128, 256, 512];

/// The part size for which `bytes`, cut into `parts` parts, hash to the multipart ETag
/// `want` (MD5 of the parts' MD5s), among `learned` and the usual sizes; `None` if none does.
/// A part size is possible only when `parts` parts of it cover the object and `parts - 1`
/// do not.
pub fn multipart_part_size(bytes: &[u8], want: &[u8; 16], parts: u32, learned: u64) -> Option<u64> {
    let len = bytes.len() as u64;
    let n = u64::from(parts.max(1));
    let fits = |p: u64| p > 0 && p.saturating_mul(n) >= len && p.saturating_mul(n - 1) < len;
    let mut candidates: Vec<u64> = std::iter::once(learned)
        .chain(USUAL_PART_SIZES_MIB.iter().map(|m| m << 20))
        .chain(std::iter::once(len.div_ceil(n).div_ceil(1 << 20) << 20))
        .filter(|&p| fits(p))
        .collect();
    candidates.dedup();
    let mut tried = Vec::new();
    for p in candidates {
        if tried.contains(&p) {
            continue;
        }
        tried.push(p);
        if multipart_md5_of(bytes, p) == *want {
            return Some(p);
        }
    }
    None
}

/// The MD5 of the MD5s of `bytes` cut in parts of `part` bytes (an S3 multipart ETag's hex).
pub(super) fn multipart_md5_of(bytes: &[u8], part: u64) -> [u8; 16] {
    use md5::Digest;
    let mut outer = md5::Md5::new();
    for p in bytes.chunks(usize::try_from(part.max(1)).unwrap_or(usize::MAX)) {
        outer.update(md5::Md5::digest(p));
    }
    outer.finalize().into()
}

impl Fetcher {
    /// The store's own check of a download of a shard index.json lists no hash for: its
    /// checksum headers, else the ETag's MD5 (plain or multipart), else (an ETag that does
    /// not match or says nothing) the checksum the store keeps for the object, when it gives
    /// one (`asked`). `previous` holds the MD5 of the last download that failed, for the rule
    /// that two downloads that agree are the object's bytes when its ETags may not be MD5s;
    /// `None` checks strictly, without it.
    ///
    /// On success, the CRC64NVME that vouched for the bytes, when a checksum of the store's
    /// with one decided (the cache keeps it as its own checksum of the file, so it need not
    /// hash the bytes again).
    pub(super) fn transfer_check(
        &self,
        shard: usize,
        url: &str,
        bytes: &[u8],
        sums: &TransferSums,
        previous: Option<&mut Option<[u8; 16]>>,
        asked: &AskedChecksums<'_>,
    ) -> Result<Option<u64>, Rejected> {
        use std::sync::atomic::Ordering::Relaxed;
        let strict = previous.is_none();
        // Two downloads agree: taken only when this dataset's ETags have never been MD5s.
        let agreed_with_previous = |got: [u8; 16]| match previous {
            Some(prev) => {
                let agree = *prev == Some(got) && !self.etags_are_md5.load(Relaxed);
                *prev = Some(got);
                agree
            }
            None => false,
        };
        // Cheapest sound check first. Checksums from the store's headers (GCS, Azure,
        // full-object S3 CRC32C) are always of the object: a mismatch is damage, never a
        // different scheme.
        if !sums.store.is_empty() {
            sums.store.check(bytes)?;
            return Ok(sums.store.crc64nvme);
        }
        // The checksum S3 keeps of the object (CRC64NVME for every upload since December
        // 2024), asked beside the download: a CRC runs at memory speed, so the ETag's MD5 is
        // not needed. A mismatch is damage (or an object replaced between the question and
        // the download: the next read of the shard asks again).
        if let Some(kept) = asked.answered() {
            kept.check(bytes)?;
            return Ok(kept.crc64nvme);
        }
        if let Some(want) = sums.md5 {
            let got: [u8; 16] = sums
                .streamed
                .md5
                .unwrap_or_else(|| md5::Md5::digest(bytes).into());
            if got == want {
                self.etags_are_md5.store(true, Relaxed);
                return Ok(None);
            }
            if let Some(checked) = asked.check_unless_etags_are_md5(bytes) {
                return checked;
            }
            if agreed_with_previous(got) {
                tracing::info!(shard, url = %url, "the ETag is not an MD5 of the object (SSE-KMS or SSE-C?); two downloads agree, using them");
                return Ok(None);
            }
            return Err(Rejected::EtagMd5 { got, want });
        }
        if let Some((want, parts)) = sums.multipart_md5 {
            let learned = self.part_size.load(Relaxed);
            // A repair checks many mixes of parts: against the part size this dataset's
            // ETags have shown, not every usual one (the full search follows the repair).
            let streamed = sums.streamed.multipart;
            let matched = match streamed {
                // Computed while the parts arrived, with the learned or the usual size.
                Some((p, got)) if got == want => Some(p),
                _ if strict && learned > 0 => (streamed.map(|(p, _)| p) != Some(learned)
                    && multipart_md5_of(bytes, learned) == want)
                    .then_some(learned),
                _ => multipart_part_size(bytes, &want, parts, learned),
            };
            if let Some(p) = matched {
                self.part_size.store(p, Relaxed);
                self.etags_are_md5.store(true, Relaxed);
                return Ok(None);
            }
            if let Some(checked) = asked.check_unless_etags_are_md5(bytes) {
                return checked;
            }
            let got: [u8; 16] = md5::Md5::digest(bytes).into();
            if agreed_with_previous(got) {
                tracing::info!(shard, url = %url, "the multipart ETag matches no usual part size; two downloads agree, using them");
                return Ok(None);
            }
            return Err(Rejected::MultipartEtag { want, parts });
        }
        // No ETag that could be an MD5 (another S3-compatible store's): the size and header
        // checks that follow, and the store's checksum when it keeps one.
        asked.check(bytes).unwrap_or(Ok(None))
    }
}

/// How many times a store that has never given a checksum of an object is asked before
/// downloads stop asking it (an S3-compatible store without checksums, or a bucket of objects
/// uploaded before S3 kept them, would otherwise cost a HEAD per download).
const CHECKSUM_ASKS_WITHOUT_ANSWER: u32 = 8;

/// The checksums the store keeps for one object ([`store::Store::checksums`]: S3 asked with
/// checksum mode), asked for at most once per shard download, and only when its ETag settles
/// nothing: an SSE-KMS or SSE-C object (an ETag that is not its MD5), a multipart ETag of an
/// unusual part size, an ETag that is no MD5 at all. Then the store's checksum decides, and a
/// mismatch is damage: no second download is needed to tell a foreign ETag from damage.
pub(super) struct AskedChecksums<'a> {
    dataset: &'a Fetcher,
    key: &'a ObjectKey,
    answer: std::sync::Mutex<Option<store::StoreChecksums>>,
}

impl<'a> AskedChecksums<'a> {
    pub(super) fn new(dataset: &'a Fetcher, key: &'a ObjectKey) -> Self {
        AskedChecksums {
            dataset,
            key,
            answer: std::sync::Mutex::new(None),
        }
    }

    /// The store's checksums, asked for on the first call. A failed request gives none
    /// (the ETag rules apply then), logged once.
    pub(super) fn get(&self) -> store::StoreChecksums {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(sums) = *self.answer.lock().unwrap_or_else(|p| p.into_inner()) {
            return sums;
        }
        // Not locked while asking: a download's parts check `answered` as they land, inside
        // the store's runtime, which must not wait for this request.
        super::add(&self.dataset.counters.checksum_questions, 1);
        let sums = match self.dataset.store.checksums(self.key) {
            Ok(sums) => sums,
            Err(e) => {
                tracing::info!(key = %self.key, error = %e, "cannot get the store's checksum of the object; checking by its ETag");
                store::StoreChecksums::default()
            }
        };
        if sums.is_empty() {
            self.dataset.store_checksums_missing.fetch_add(1, Relaxed);
        } else {
            self.dataset.store_checksums_seen.store(true, Relaxed);
            super::add(&self.dataset.counters.checksum_answers, 1);
        }
        *self
            .answer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(sums)
    }

    /// Whether asking is worth a request: only S3 keeps checksums apart from its answers
    /// (GCS and Azure send theirs with every whole-object answer, read before this is
    /// reached), and a store that never gave one is asked [`CHECKSUM_ASKS_WITHOUT_ANSWER`]
    /// times only.
    pub(super) fn worth_asking(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let d = self.dataset;
        d.is_s3()
            && (d.store_checksums_seen.load(Relaxed)
                || d.store_checksums_missing.load(Relaxed) < CHECKSUM_ASKS_WITHOUT_ANSWER)
    }

    /// The answer, when the store was asked and gave a checksum; never asks.
    pub(super) fn answered(&self) -> Option<store::StoreChecksums> {
        let answer = *self.answer.lock().unwrap_or_else(|p| p.into_inner());
        answer.filter(|sums| !sums.is_empty())
    }

    /// Asks now if a check would ask, and makes later checks use that answer only (none
    /// when it did not ask): for checks made where no request can be sent.
    pub(super) fn settle(&self) {
        let asked = self
            .answer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        let etags_are_md5 = self
            .dataset
            .etags_are_md5
            .load(std::sync::atomic::Ordering::Relaxed);
        if !asked && !etags_are_md5 && self.worth_asking() {
            self.get();
        }
        self.answer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(store::StoreChecksums::default);
    }

    /// The bytes checked against the store's checksum, `None` when it gives none (or when
    /// this store never has, after [`CHECKSUM_ASKS_WITHOUT_ANSWER`] tries).
    fn check(&self, bytes: &[u8]) -> Option<Result<Option<u64>, Rejected>> {
        let answered = *self.answer.lock().unwrap_or_else(|p| p.into_inner());
        let sums = match answered {
            Some(sums) => sums,
            None if self.worth_asking() => self.get(),
            None => return None,
        };
        (!sums.is_empty()).then(|| {
            sums.check(bytes)
                .map(|()| sums.crc64nvme)
                .map_err(Rejected::from)
        })
    }

    /// [`Self::check`] for a download whose MD5 differs from its ETag: only while this
    /// dataset's ETags have never been MD5s (once one matched, a mismatch is damage).
    fn check_unless_etags_are_md5(&self, bytes: &[u8]) -> Option<Result<Option<u64>, Rejected>> {
        if self
            .dataset
            .etags_are_md5
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        self.check(bytes)
    }
}

/// What the store said about a download's bytes, for [`Fetcher::transfer_check`].
pub(super) struct TransferSums {
    pub(super) md5: Option<[u8; 16]>,
    pub(super) multipart_md5: Option<([u8; 16], u32)>,
    pub(super) store: store::StoreChecksums,
    /// The ETag's digest as computed while the bytes arrived (saves hashing them again).
    pub(super) streamed: Streamed,
}
