//! `Dataset`: a source's store, its parsed `index.json`, and its identity.
//!
//! Also the two ways of getting shard bytes from the store: a whole shard, downloaded,
//! verified and decompressed ([`Dataset::fetch_shard`]), and ranged reads of an uncompressed
//! shard's header and samples ([`Dataset::fetch_header`], [`Dataset::fetch_range`]) for
//! random access without downloading the shard.

use super::download_budget::{DownloadBuffer, DownloadPermit};
use super::etag_digest::{EtagDigest, Streamed};
use super::layout::Staged;
use super::stats::Counters;
use super::CacheError;
use crate::mds::{self, FileRef, Index, ShardEntry, ShardHeader};
use crate::store::{self, BlockingStore, ObjectKey, Source, StoreError, StoreOptions};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::sync::Arc;

/// The name of the index object at the dataset root.
pub const INDEX_JSON: &str = "index.json";

/// A dataset's identity: where it lives and which `index.json` it has. Two mounts with the
/// same identity share cached shards; a rewritten dataset at the same URL gets a new one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DatasetId {
    /// The canonical source URL (see [`Source::canonical`]).
    pub source: String,
    /// Lowercase hex SHA-256 of the `index.json` bytes.
    pub index_sha256: String,
}

impl DatasetId {
    /// The identity of the dataset at `source` whose index.json is `index_bytes`.
    pub fn new(source: &str, index_bytes: &[u8]) -> Self {
        DatasetId {
            source: source.to_string(),
            index_sha256: hex::encode(Sha256::digest(index_bytes)),
        }
    }

    /// A file-name-safe key: 32 hex digits of SHA-256(source, NUL, index digest).
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.source.as_bytes());
        h.update([0u8]);
        h.update(self.index_sha256.as_bytes());
        hex::encode(&h.finalize()[..16])
    }
}

/// A dataset opened from a SOURCE: store, parsed index and identity.
#[derive(Debug)]
pub struct Dataset {
    store: BlockingStore,
    index: Arc<Index>,
    index_bytes: Bytes,
    id: DatasetId,
    pub(crate) counters: Arc<Counters>,
    /// Some shard's ETag has matched the MD5 of its bytes: this store's ETags are MD5s, so a
    /// mismatch is damage, never an SSE-KMS/SSE-C ETag.
    etags_are_md5: std::sync::atomic::AtomicBool,
    /// Whether the store has given a checksum of an object when asked ([`AskedChecksums`]).
    store_checksums_seen: std::sync::atomic::AtomicBool,
    /// Times it gave none, while it never gave one: past [`CHECKSUM_ASKS_WITHOUT_ANSWER`],
    /// downloads whose ETag says nothing no longer ask.
    store_checksums_missing: std::sync::atomic::AtomicU32,
    /// The part size that last matched a multipart ETag (0: none yet); tried first next time.
    part_size: std::sync::atomic::AtomicU64,
    /// Shards larger than this are downloaded as parallel ranged parts of this size (0: never).
    fetch_part_size: u64,
}

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
fn multipart_md5_of(bytes: &[u8], part: u64) -> [u8; 16] {
    use md5::Digest;
    let mut outer = md5::Md5::new();
    for p in bytes.chunks(usize::try_from(part.max(1)).unwrap_or(usize::MAX)) {
        outer.update(md5::Md5::digest(p));
    }
    outer.finalize().into()
}

impl Dataset {
    /// Opens `source` with `opts`, then fetches and parses its `index.json`.
    pub fn load(source: &str, opts: &StoreOptions) -> Result<Dataset, CacheError> {
        let parsed = Source::parse(source)?;
        let store = match store::open(source, opts) {
            Ok(s) => s,
            // A missing local folder: say which index.json we were looking for.
            Err(StoreError::NotFound { detail, .. }) => {
                return Err(StoreError::NotFound {
                    url: format!("{}/{INDEX_JSON}", parsed.canonical()),
                    detail,
                }
                .into())
            }
            Err(e) => return Err(e.into()),
        };
        Ok(
            Self::from_store(BlockingStore::new(store, 2)?, parsed.canonical())?
                .with_part_size(opts.part_size),
        )
    }

    /// Downloads shards larger than `part_size` as parallel ranged GETs of that size
    /// (0: one GET per shard). See [`Dataset::fetch_shard`] for when parts are used.
    pub fn with_part_size(mut self, part_size: u64) -> Self {
        self.fetch_part_size = part_size;
        self
    }

    /// Fetches and parses `index.json` through an already opened store rooted at the dataset;
    /// `source` is the canonical source URL used for the identity.
    pub fn from_store(store: BlockingStore, source: &str) -> Result<Dataset, CacheError> {
        let key = ObjectKey::new(INDEX_JSON)?;
        let index_bytes = store.get(&key)?;
        let index = Index::parse(&index_bytes).map_err(|e| CacheError::Index {
            url: store.url_of(&key),
            reason: e.to_string(),
        })?;
        let id = DatasetId::new(source, &index_bytes);
        let counters = Arc::new(Counters::default());
        Counters::add(&counters.bytes_fetched, index_bytes.len() as u64);
        Ok(Dataset {
            store,
            index: Arc::new(index),
            index_bytes,
            id,
            counters,
            etags_are_md5: std::sync::atomic::AtomicBool::new(false),
            store_checksums_seen: std::sync::atomic::AtomicBool::new(false),
            store_checksums_missing: std::sync::atomic::AtomicU32::new(0),
            part_size: std::sync::atomic::AtomicU64::new(0),
            fetch_part_size: StoreOptions::default().part_size,
        })
    }

    /// The store (blocking facade).
    pub fn store(&self) -> &BlockingStore {
        &self.store
    }

    /// The parsed index.
    pub fn index(&self) -> &Arc<Index> {
        &self.index
    }

    /// The index.json bytes as stored.
    pub fn index_bytes(&self) -> &Bytes {
        &self.index_bytes
    }

    /// The dataset's identity.
    pub fn id(&self) -> &DatasetId {
        &self.id
    }

    /// The index entry of `shard`.
    pub fn shard(&self, shard: usize) -> Result<&ShardEntry, CacheError> {
        let shards = self.index.shards();
        shards.get(shard).ok_or(CacheError::NoSuchShard {
            shard,
            shards: shards.len(),
        })
    }

    fn raw_key(&self, shard: usize) -> Result<(ObjectKey, &ShardEntry), CacheError> {
        let entry = self.shard(shard)?;
        Ok((ObjectKey::new(entry.raw.basename.clone())?, entry))
    }

    /// True when the shard is stored uncompressed, so ranged reads can serve it.
    pub fn is_ranged(&self, shard: usize) -> Result<bool, CacheError> {
        Ok(self.shard(shard)?.zip.is_none())
    }

    /// The header of an uncompressed shard by ranged GETs of `header_len(samples)` bytes (the
    /// sample count comes from index.json, then is checked against the bytes). No checksum
    /// covers a range, and a header sizes every file of its shard, so it is read twice at once
    /// and the two compared; when they differ a third read settles which one was damaged.
    pub fn fetch_header(&self, shard: usize) -> Result<ShardHeader, CacheError> {
        let (key, entry) = self.raw_key(shard)?;
        let url = self.store.url_of(&key);
        if entry.zip.is_some() {
            return Err(CacheError::Corrupt {
                shard,
                file: url,
                reason: "ranged header read of a compressed shard".into(),
            });
        }
        let len = mds::header_len(entry.samples);
        if len > entry.raw.bytes {
            return Err(CacheError::Corrupt {
                shard,
                file: url,
                reason: format!("index.json says {} samples, which need a {len}-byte header, but the shard has {} bytes", entry.samples, entry.raw.bytes),
            });
        }
        let bytes = self.range_by_majority(shard, &key, 0..len, "header")?;
        check_header(shard, &url, entry, &bytes)
    }

    /// Bytes `range` of `key` read twice at once and compared; when they differ a third
    /// read settles which one was damaged (two of three must agree). For ranged bytes no
    /// checksum covers (`what` names them in the messages).
    fn range_by_majority(
        &self,
        shard: usize,
        key: &ObjectKey,
        range: Range<u64>,
        what: &str,
    ) -> Result<Bytes, CacheError> {
        let (a, b) = self.store.get_range_twice(key, range.clone());
        let (a, b) = (a?, b?);
        Counters::add(&self.counters.bytes_fetched, (a.len() + b.len()) as u64);
        Counters::add(&self.counters.ranged_fetches, 2);
        if a == b {
            return Ok(a);
        }
        let url = self.store.url_of(key);
        let c = self.store.get_range(key, range)?;
        Counters::add(&self.counters.bytes_fetched, c.len() as u64);
        Counters::add(&self.counters.ranged_fetches, 1);
        tracing::warn!(shard, file = %url, "two reads of a shard {what} differed; a third decides");
        majority(a, b, c).ok_or_else(|| CacheError::Corrupt {
            shard,
            file: url,
            reason: format!("three ranged reads of the {what} gave three different answers"),
        })
    }

    /// Bytes `range` of an uncompressed shard (a sample), by ranged GETs: read twice at once
    /// and compared, a third read deciding when they differ, since no checksum covers a range
    /// and these bytes size files or are printed (`shardfs cat`).
    pub fn fetch_range(&self, shard: usize, range: Range<u64>) -> Result<Bytes, CacheError> {
        let (key, entry) = self.raw_key(shard)?;
        if range.end > entry.raw.bytes || range.start > range.end {
            return Err(CacheError::OutOfRange {
                shard,
                file: entry.raw.basename.clone(),
                what: format!(
                    "bytes {}..{} of a {}-byte shard",
                    range.start, range.end, entry.raw.bytes
                ),
            });
        }
        self.range_by_majority(shard, &key, range, "sample")
    }

    /// True when the dataset is on a local file system, where reading a whole shard (and so
    /// verifying its hash) costs little.
    pub fn is_local(&self) -> bool {
        self.id.source.starts_with("file://")
    }

    /// Sample `i` of a shard: two ranged GETs (header, sample) when the shard is
    /// uncompressed and remote (ranges cannot be hash-checked; sizes and offsets are); the
    /// whole shard, verified and decompressed (not cached), when compressed or local.
    pub fn fetch_sample(&self, shard: usize, i: u32) -> Result<Bytes, CacheError> {
        let entry = self.shard(shard)?;
        let out_of_range = || CacheError::OutOfRange {
            shard,
            file: entry.raw.basename.clone(),
            what: format!("sample {i} of {}", entry.samples),
        };
        if entry.zip.is_none() && !self.is_local() {
            let header = self.fetch_header(shard)?;
            let r = header.sample_range(i).map_err(|_| out_of_range())?;
            self.fetch_range(shard, r)
        } else {
            let raw = self.fetch_shard(shard, 3)?;
            let header =
                ShardHeader::parse(&raw).map_err(|e| corrupt(shard, &entry.raw.basename, e))?;
            let r = header.sample_range(i).map_err(|_| out_of_range())?;
            let (start, end) = (r.start as usize, r.end as usize);
            // fetch_shard checked that the header's last offset is the shard's length.
            if end > raw.len() || start > end {
                return Err(out_of_range());
            }
            Ok(raw.slice(start..end))
        }
    }

    /// Downloads a whole shard and returns its verified, uncompressed bytes: the stored
    /// file's size and one known hash are checked (up to `attempts` downloads on a mismatch),
    /// then it is decompressed to exactly `raw.bytes` and its header must agree with
    /// index.json. Corrupt bytes never leave this function.
    ///
    /// A shard larger than the part size comes as parallel ranged GETs when index.json lists
    /// a hash for it or the store is S3 (whose ETag every part carries and must agree on).
    /// When such a download fails its check, the next attempts repair it part by part
    /// ([`store::refetch_differing_parts`]) instead of downloading it whole again.
    pub fn fetch_shard(&self, shard: usize, attempts: u32) -> Result<Bytes, CacheError> {
        self.fetch_shard_into(shard, attempts, None, None)
            .map(|(raw, _)| raw)
    }

    /// [`Self::fetch_shard`], downloading in parts into buffers of `permit` (reused from
    /// earlier downloads, and holding the permit's bytes until their last user is done)
    /// when given, else into fresh memory.
    ///
    /// With `stage`, an uncompressed shard downloaded in parts is written to a staged file
    /// (by `stage`, on a thread of its own) while its last bytes are hashed: the staged file
    /// and the bytes' xxh3 come back with the bytes when they pass every check, and are
    /// removed when they do not.
    pub(super) fn fetch_shard_into(
        &self,
        shard: usize,
        attempts: u32,
        permit: Option<&DownloadPermit>,
        stage: Option<Stager<'_>>,
    ) -> Result<(Bytes, Option<(Staged, u64)>), CacheError> {
        let entry = self.shard(shard)?;
        let stage = stage.filter(|_| entry.zip.is_none());
        let stored = entry.stored_file();
        let key = ObjectKey::new(stored.basename.clone())?;
        let url = self.store.url_of(&key);
        let check = cheapest_hash(stored);
        let mut last = String::new();
        // With no hash in index.json, the store's checksum headers (GCS x-goog-hash, Azure
        // Content-MD5), else the store's MD5 (an S3 ETag) check the transfer. An
        // ETag that is not an MD5 (SSE-KMS, SSE-C) looks the same: then the checksum S3 keeps
        // of the object decides (`asked`); where it keeps none, a mismatch is retried, and
        // two downloads with the same MD5 are taken as the object's true bytes — unless an ETag
        // of this dataset has matched before (then its ETags are MD5s and this is damage).
        let mut previous_md5: Option<[u8; 16]> = None;
        // When the ETag settles nothing, the store's own checksum of the object, asked once.
        let asked = AskedChecksums::new(self, &key);
        let downloads = if check.hashes.is_empty() {
            attempts.max(2)
        } else {
            attempts.max(1)
        };
        // Parallel ranged parts need a check that works on ranges: a hash in index.json, or
        // the S3 ETag every ranged answer carries. GCS and Azure send their checksums only
        // with whole-object answers, so a hashless shard there comes in one GET.
        let in_parts = self.fetch_part_size > 0
            && stored.bytes > self.fetch_part_size
            && (!check.hashes.is_empty() || self.id.source.starts_with("s3://"));
        let failed = |attempt: u32, reason: &str| {
            Counters::add(&self.counters.verify_failures, 1);
            tracing::warn!(shard, url = %url, attempt, reason, "downloaded shard failed verification");
        };
        // The last download in parts that failed its check, kept to be repaired.
        let mut held: Option<(DownloadBuffer, store::EtagMd5s)> = None;
        for attempt in 1..=downloads {
            let repairing = held.is_some();
            let fetched = match held.take() {
                Some((whole, tag)) => self.repair(shard, &key, &check, whole, tag, &asked),
                None if in_parts => self.download_in_parts(
                    &key,
                    stored.bytes,
                    check.hashes.is_empty(),
                    permit,
                    stage,
                ),
                None => self.store.get_fetched(&key).map(Download::Whole),
            };
            let download = match fetched {
                Ok(d) => d,
                // Rewritten while we read it: like damage, worth another download.
                Err(e @ StoreError::Changed { .. }) => {
                    last = e.to_string();
                    failed(attempt, &last);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let checking = std::time::Instant::now();
            if !repairing {
                // A repair counted the parts it fetched again.
                Counters::add(&self.counters.bytes_fetched, download.len() as u64);
            }
            let sums = download.sums();
            // The stored bytes first (the index's hash, else the store's checksums): a
            // download in parts that fails here is kept, to be repaired part by part.
            let stored_ok = if check.hashes.is_empty() {
                self.transfer_check(
                    shard,
                    &url,
                    &download,
                    &sums,
                    Some(&mut previous_md5),
                    &asked,
                )
            } else {
                Ok(())
            }
            .and_then(|()| mds::verify_hashes(&check, &download).map_err(|e| e.to_string()));
            if let Err(reason) = stored_ok {
                last = reason;
                failed(attempt, &last);
                if let Download::Parts(whole, tag, _, _) = download {
                    held = Some((whole, tag));
                }
                continue;
            }
            let mut download = download;
            let staged = download.take_staged();
            let outcome = unpack(entry, download.freeze()).and_then(|raw| {
                check_header(shard, &url, entry, &raw)
                    .map(|_| raw)
                    .map_err(|e| match e {
                        // The shard and URL are named once, by the error returned below.
                        CacheError::Corrupt { reason, .. } => reason,
                        other => other.to_string(),
                    })
            });
            match outcome {
                Ok(raw) => {
                    tracing::debug!(
                        shard,
                        check_ms = checking.elapsed().as_millis() as u64,
                        staged = staged.is_some(),
                        "shard checked"
                    );
                    return Ok((raw, staged));
                }
                Err(reason) => last = reason,
            }
            failed(attempt, &last);
        }
        Err(CacheError::Corrupt {
            shard,
            file: url,
            reason: format!("{last} (after {downloads} downloads)"),
        })
    }

    /// `key` (`size` bytes) as parallel ranged parts, into a buffer of `permit` (else fresh
    /// memory). A `hashless` shard is checked by its ETag, whose MD5 is computed while the
    /// parts arrive; what arrived with the last part is hashed after. When that is a serial
    /// MD5 (a plain ETag), `stage` (if given) writes the bytes to disk on another thread
    /// meanwhile.
    fn download_in_parts(
        &self,
        key: &ObjectKey,
        size: u64,
        hashless: bool,
        permit: Option<&DownloadPermit>,
        stage: Option<Stager<'_>>,
    ) -> Result<Download, StoreError> {
        let len = usize::try_from(size).map_err(|_| StoreError::Other {
            url: self.store.url_of(key),
            detail: format!("{size} bytes do not fit in memory on this machine"),
        })?;
        let mut whole = match permit {
            Some(p) => p.buffer(len),
            None => DownloadBuffer::unkept(len),
        };
        let mut digest = hashless.then(|| {
            EtagDigest::new(
                size,
                self.part_size.load(std::sync::atomic::Ordering::Relaxed),
            )
        });
        let tag = self.store.get_in_parts(
            key,
            &mut whole,
            self.fetch_part_size,
            &mut HashWhileLanding(digest.as_mut()),
        )?;
        let bytes: &[u8] = &whole;
        let landed = std::time::Instant::now();
        // Written beside a long serial hash only: otherwise the shard is published as soon as
        // it is checked, and written after (its first reader need not wait for the disk).
        let stage = stage.filter(|_| digest.as_mut().is_some_and(|d| d.serial_tail(&tag)));
        let staged = std::thread::scope(|s| {
            let writer = stage.map(|f| s.spawn(move || f(bytes)));
            let streamed = digest.map(|d| d.finish(&tag, bytes, hashing_threads()));
            let staged = match writer.map(|w| w.join()) {
                Some(Ok(Ok(staged))) => Some(staged),
                Some(Ok(Err(e))) => {
                    // The fill writes the shard again after the checks, and reports then.
                    tracing::debug!(error = %e, "cannot stage a download beside its check");
                    None
                }
                Some(Err(_)) => {
                    tracing::warn!("staging a download panicked; writing it after the check");
                    None
                }
                None => None,
            };
            (streamed.unwrap_or_default(), staged)
        });
        let (streamed, staged) = staged;
        tracing::debug!(
            key = %key,
            tail_ms = landed.elapsed().as_millis() as u64,
            "download in parts landed; its checksum and staged write are done"
        );
        Ok(Download::Parts(whole, tag, streamed, staged))
    }

    /// One more attempt at a shard whose download in parts (`whole`, with the ETag `tag` its
    /// parts agreed on) failed its check: its parts fetched again, the differing ones put in,
    /// until the shard's hash (or the store's checksum of a hashless shard) holds.
    fn repair(
        &self,
        shard: usize,
        key: &ObjectKey,
        check: &FileRef,
        mut whole: DownloadBuffer,
        tag: store::EtagMd5s,
        asked: &AskedChecksums<'_>,
    ) -> Result<Download, StoreError> {
        let url = self.store.url_of(key);
        let sums = TransferSums {
            md5: tag.0,
            multipart_md5: tag.1,
            store: store::StoreChecksums::default(),
            streamed: Streamed::default(),
        };
        // The check below runs inside the store's runtime, where no request can be sent.
        asked.settle();
        let repair = self.store.refetch_differing_parts(
            key,
            &mut whole,
            self.fetch_part_size,
            &tag,
            |bytes| {
                if check.hashes.is_empty() {
                    self.transfer_check(shard, &url, bytes, &sums, None, asked)
                        .is_ok()
                } else {
                    mds::verify_hashes(check, bytes).is_ok()
                }
            },
        )?;
        Counters::add(&self.counters.parts_refetched, u64::from(repair.refetched));
        Counters::add(&self.counters.bytes_fetched, repair.bytes);
        if repair.verified {
            Counters::add(&self.counters.repaired_downloads, 1);
        }
        tracing::info!(
            shard,
            url = %url,
            parts_refetched = repair.refetched,
            parts_replaced = repair.replaced,
            repaired = repair.verified,
            "fetched the parts of a damaged download again"
        );
        Ok(Download::Parts(whole, tag, Streamed::default(), None))
    }

    /// The store's own check of a download of a shard index.json lists no hash for: its
    /// checksum headers, else the ETag's MD5 (plain or multipart), else (an ETag that does
    /// not match or says nothing) the checksum the store keeps for the object, when it gives
    /// one (`asked`). `previous` holds the MD5 of the last download that failed, for the rule
    /// that two downloads that agree are the object's bytes when its ETags may not be MD5s;
    /// `None` checks strictly, without it.
    fn transfer_check(
        &self,
        shard: usize,
        url: &str,
        bytes: &[u8],
        sums: &TransferSums,
        previous: Option<&mut Option<[u8; 16]>>,
        asked: &AskedChecksums<'_>,
    ) -> Result<(), String> {
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
        // Checksums from the store's headers (GCS, Azure, full-object S3 CRC32C) are
        // always of the object: a mismatch is damage, never a different scheme.
        if !sums.store.is_empty() {
            return sums.store.check(bytes).map_err(|e| e.to_string());
        }
        if let Some(want) = sums.md5 {
            let got: [u8; 16] = sums
                .streamed
                .md5
                .unwrap_or_else(|| md5::Md5::digest(bytes).into());
            if got == want {
                self.etags_are_md5.store(true, Relaxed);
                return Ok(());
            }
            if let Some(checked) = asked.check_unless_etags_are_md5(bytes) {
                return checked;
            }
            if agreed_with_previous(got) {
                tracing::info!(shard, url = %url, "the ETag is not an MD5 of the object (SSE-KMS or SSE-C?); two downloads agree, using them");
                return Ok(());
            }
            return Err(format!(
                "MD5 {} differs from the store's ETag {}",
                hex::encode(got),
                hex::encode(want)
            ));
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
                return Ok(());
            }
            if let Some(checked) = asked.check_unless_etags_are_md5(bytes) {
                return checked;
            }
            let got: [u8; 16] = md5::Md5::digest(bytes).into();
            if agreed_with_previous(got) {
                tracing::info!(shard, url = %url, "the multipart ETag matches no usual part size; two downloads agree, using them");
                return Ok(());
            }
            return Err(format!(
                "the bytes match the store's multipart ETag {}-{parts} for no usual part size",
                hex::encode(want)
            ));
        }
        // No ETag that could be an MD5 (another S3-compatible store's): the size and header
        // checks that follow, and the store's checksum when it keeps one.
        asked.check(bytes).unwrap_or(Ok(()))
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
struct AskedChecksums<'a> {
    dataset: &'a Dataset,
    key: &'a ObjectKey,
    answer: std::sync::Mutex<Option<store::StoreChecksums>>,
}

impl<'a> AskedChecksums<'a> {
    fn new(dataset: &'a Dataset, key: &'a ObjectKey) -> Self {
        AskedChecksums {
            dataset,
            key,
            answer: std::sync::Mutex::new(None),
        }
    }

    /// The store's checksums, asked for on the first call. A failed request gives none
    /// (the ETag rules apply then), logged once.
    fn get(&self) -> store::StoreChecksums {
        use std::sync::atomic::Ordering::Relaxed;
        let mut answer = self.answer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sums) = *answer {
            return sums;
        }
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
        }
        *answer = Some(sums);
        sums
    }

    /// Whether asking is worth a request: only S3 keeps checksums apart from its answers
    /// (GCS and Azure send theirs with every whole-object answer, read before this is
    /// reached), and a store that never gave one is asked [`CHECKSUM_ASKS_WITHOUT_ANSWER`]
    /// times only.
    fn worth_asking(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let d = self.dataset;
        d.id.source.starts_with("s3://")
            && (d.store_checksums_seen.load(Relaxed)
                || d.store_checksums_missing.load(Relaxed) < CHECKSUM_ASKS_WITHOUT_ANSWER)
    }

    /// Asks now if a check would ask, and makes later checks use that answer only (none
    /// when it did not ask): for checks made where no request can be sent.
    fn settle(&self) {
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
    fn check(&self, bytes: &[u8]) -> Option<Result<(), String>> {
        let answered = *self.answer.lock().unwrap_or_else(|p| p.into_inner());
        let sums = match answered {
            Some(sums) => sums,
            None if self.worth_asking() => self.get(),
            None => return None,
        };
        (!sums.is_empty()).then(|| sums.check(bytes).map_err(|e| e.to_string()))
    }

    /// [`Self::check`] for a download whose MD5 differs from its ETag: only while this
    /// dataset's ETags have never been MD5s (once one matched, a mismatch is damage).
    fn check_unless_etags_are_md5(&self, bytes: &[u8]) -> Option<Result<(), String>> {
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

/// Feeds a download's ETag digest while its parts land, except what lands with the last part
/// (hashed after the download, beside the staged write and on several threads).
struct HashWhileLanding<'a>(Option<&'a mut EtagDigest>);

impl store::Landing for HashWhileLanding<'_> {
    fn landed(&mut self, tag: &store::EtagMd5s, at: u64, bytes: &[u8], all_in: bool) {
        if let (Some(d), false) = (self.0.as_mut(), all_in) {
            d.landed(tag, at, bytes);
        }
    }

    fn in_order(&mut self, tag: &store::EtagMd5s, bytes: &[u8], all_in: bool) {
        if let (Some(d), false) = (self.0.as_mut(), all_in) {
            d.in_order(tag, bytes);
        }
    }
}

/// Threads that hash what is left of a download's ETag digest once its last part is in: the
/// machine's cores, at most four.
fn hashing_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// One download of a stored shard file: made in parts into a download buffer, or whole by the
/// store's client.
enum Download {
    /// Ranged parts written into a buffer of the download budget, the ETag they agreed on,
    /// its digest computed as they arrived (if it was), and the bytes staged on disk with
    /// their xxh3 (if they were).
    Parts(
        DownloadBuffer,
        store::EtagMd5s,
        Streamed,
        Option<(Staged, u64)>,
    ),
    /// One GET.
    Whole(store::Fetched),
}

impl Download {
    /// What the store said about the bytes.
    fn sums(&self) -> TransferSums {
        match self {
            Download::Parts(_, (md5, multipart_md5), streamed, _) => TransferSums {
                md5: *md5,
                multipart_md5: *multipart_md5,
                // Checksum headers of a range are not the object's.
                store: store::StoreChecksums::default(),
                streamed: *streamed,
            },
            Download::Whole(f) => TransferSums {
                md5: f.md5,
                multipart_md5: f.multipart_md5,
                store: f.store_sums,
                streamed: Streamed::default(),
            },
        }
    }

    /// The staged file of the bytes and their xxh3, taken out.
    fn take_staged(&mut self) -> Option<(Staged, u64)> {
        match self {
            Download::Parts(_, _, _, staged) => staged.take(),
            Download::Whole(_) => None,
        }
    }

    /// The bytes, shared from here on; a buffer goes back to its budget when the last
    /// reference is gone.
    fn freeze(self) -> Bytes {
        match self {
            Download::Parts(buffer, _, _, _) => Bytes::from_owner(buffer),
            Download::Whole(f) => f.bytes,
        }
    }
}

impl std::ops::Deref for Download {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Download::Parts(buffer, _, _, _) => buffer,
            Download::Whole(f) => &f.bytes,
        }
    }
}

/// Writes bytes about to be checked to a staged file (see [`Dataset::fetch_shard_into`]):
/// the staged file and the bytes' xxh3-64.
pub(super) type Stager<'a> = &'a (dyn Fn(&[u8]) -> Result<(Staged, u64), CacheError> + Sync);

/// What the store said about a download's bytes, for [`Dataset::transfer_check`].
struct TransferSums {
    md5: Option<[u8; 16]>,
    multipart_md5: Option<([u8; 16], u32)>,
    store: store::StoreChecksums,
    /// The ETag's digest as computed while the bytes arrived (saves hashing them again).
    streamed: Streamed,
}

/// The answer two of three reads agree on, if any.
fn majority(a: Bytes, b: Bytes, c: Bytes) -> Option<Bytes> {
    if a == b || a == c {
        Some(a)
    } else if b == c {
        Some(b)
    } else {
        None
    }
}

fn corrupt(shard: usize, file: &str, e: impl std::fmt::Display) -> CacheError {
    CacheError::Corrupt {
        shard,
        file: file.to_string(),
        reason: e.to_string(),
    }
}

/// Parses a header and checks it against the index entry.
fn check_header(
    shard: usize,
    url: &str,
    entry: &ShardEntry,
    bytes: &[u8],
) -> Result<ShardHeader, CacheError> {
    let header = ShardHeader::parse(bytes).map_err(|e| corrupt(shard, url, e))?;
    if header.num_samples() != entry.samples {
        return Err(corrupt(
            shard,
            url,
            format!(
                "header has {} samples, index.json says {}",
                header.num_samples(),
                entry.samples
            ),
        ));
    }
    if header.file_len() != entry.raw.bytes {
        return Err(corrupt(
            shard,
            url,
            format!(
                "header says {} bytes, index.json says {}",
                header.file_len(),
                entry.raw.bytes
            ),
        ));
    }
    // With only fixed-size columns every sample has the same length: a changed offset (the
    // ranged read is not hash-checked) shows as a sample of another length.
    let fixed: Option<u64> = entry.columns.iter().map(|c| c.size.map(u64::from)).sum();
    if let Some(want) = fixed {
        for i in 0..header.num_samples() {
            let r = header.sample_range(i).map_err(|e| corrupt(shard, url, e))?;
            if r.end - r.start != want {
                return Err(corrupt(
                    shard,
                    url,
                    format!(
                        "sample {i} has {} bytes, but its columns are fixed at {want}",
                        r.end - r.start
                    ),
                ));
            }
        }
    }
    Ok(header)
}

/// The raw shard from its verified stored bytes: decompressed, or the bytes themselves.
fn unpack(entry: &ShardEntry, bytes: Bytes) -> Result<Bytes, String> {
    match (&entry.zip, &entry.compression) {
        (Some(_), Some(c)) => mds::decompress(c, &bytes, Some(entry.raw.bytes))
            .map(Bytes::from)
            .map_err(|e| format!("decompressing: {e}")),
        (Some(_), None) => Err("index.json lists a compressed file without a compression".into()),
        (None, _) => Ok(bytes),
    }
}

/// The file reference with only its cheapest known hash (size is always checked).
/// Preference: fastest first (xxhash family, then md5/blake2, then SHA).
fn cheapest_hash(file: &FileRef) -> FileRef {
    const ORDER: [&str; 17] = [
        "xxh3_64", "xxh3_128", "xxh128", "xxh64", "xxh32", "blake2b", "md5", "blake2s", "sha1",
        "sha512", "sha384", "sha256", "sha224", "sha3_224", "sha3_256", "sha3_384", "sha3_512",
    ];
    let mut out = file.clone();
    out.hashes.clear();
    if let Some((k, v)) = ORDER
        .iter()
        .filter(|a| mds::HASH_ALGOS.contains(a))
        .find_map(|a| file.hashes.get_key_value(*a))
    {
        out.hashes.insert(k.clone(), v.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_reads_that_agree_outvote_the_third_and_three_that_differ_give_nothing() {
        let (x, y, z) = (
            Bytes::from_static(b"x"),
            Bytes::from_static(b"y"),
            Bytes::from_static(b"z"),
        );
        assert_eq!(majority(x.clone(), y.clone(), x.clone()), Some(x.clone()));
        assert_eq!(majority(y.clone(), x.clone(), x.clone()), Some(x.clone()));
        assert_eq!(majority(x.clone(), x.clone(), y.clone()), Some(x.clone()));
        assert_eq!(majority(x, y, z), None);
    }
}
