//! A whole shard: downloaded (in one GET, or in parallel ranged parts into a buffer the
//! caller hands over), checked (index.json's cheapest hash, else the store's own check),
//! repaired part by part when a download in parts fails its check, decompressed, and its
//! header checked against the index.

use super::error::Rejected;
use super::etag_digest::{EtagDigest, Streamed};
use super::ranged::check_header;
use super::transfer_check::{AskedChecksums, TransferSums};
use super::{add, FetchError, Fetcher, ShardFault};
use crate::mds::{self, FileRef, ShardEntry};
use crate::store::{self, ObjectKey, StoreError};
use bytes::Bytes;
use std::sync::Arc;

/// Memory a download in parts lands in, handed over by the caller (the cache's download
/// budget), which gets it back when the last user of the shard's bytes lets go.
pub trait PartBuffer: AsRef<[u8]> + AsMut<[u8]> + Send + 'static {}

impl<T: AsRef<[u8]> + AsMut<[u8]> + Send + 'static> PartBuffer for T {}

/// Where the parts of a download are written as they land, while the rest of them arrive
/// (the cache: a staged file). An error ends the staging: the caller writes the bytes after
/// their check instead. Dropped, unused, when the bytes fail their check.
pub trait PartSink: Send {
    /// Writes `bytes`, a whole part: the object's bytes from byte `at`.
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()>;
}

/// Writes nothing: the sink type of callers that stage nothing.
impl PartSink for () {
    fn write_at(&mut self, _at: u64, _bytes: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

/// Makes a [`PartSink`] for an object of the given length; `None` when it cannot (the
/// caller writes the bytes after their check then).
pub type Stager<'a, S> = &'a (dyn Fn(u64) -> Option<S> + Sync);

/// What the caller's stager made of a download's parts: its sink, and the parts that landed
/// after the download's last byte was in and are not written yet. Writing those is left to
/// the caller ([`StagedParts::write_rest`]), after the bytes are checked and handed to the
/// readers waiting for them, so no reader waits for the cache disk.
#[derive(Debug)]
pub struct StagedParts<S> {
    sink: S,
    /// `(at, len)` of each part not written yet.
    rest: Vec<(u64, usize)>,
}

impl<S: PartSink> StagedParts<S> {
    /// Writes the parts not written yet from `stored`, the object's bytes (the shard's raw
    /// bytes: only uncompressed shards are staged), and returns the sink, every part in it.
    pub fn write_rest(mut self, stored: &[u8]) -> std::io::Result<S> {
        for (at, len) in std::mem::take(&mut self.rest) {
            let part = usize::try_from(at)
                .ok()
                .and_then(|start| stored.get(start..start.checked_add(len)?))
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!(
                            "a staged part at byte {at} ({len} bytes) is past the shard's {} bytes",
                            stored.len()
                        ),
                    )
                })?;
            self.sink.write_at(at, part)?;
        }
        Ok(self.sink)
    }

    /// How many parts [`Self::write_rest`] has left to write.
    pub fn parts_left(&self) -> usize {
        self.rest.len()
    }
}

/// A shard from [`Fetcher::fetch_shard_into`]: its verified, uncompressed bytes, and what
/// else the download leaves that the caller can use.
#[derive(Debug)]
pub struct FetchedShard<S> {
    /// The shard's bytes, uncompressed and checked.
    pub raw: Bytes,
    /// What the caller's stager made of the bytes (when it ran and did not fail), with the
    /// parts still to write.
    pub staged: Option<StagedParts<S>>,
    /// The CRC64NVME of `raw`, when a checksum the store keeps vouched for the bytes (and
    /// they were stored uncompressed): a checksum of the shard the caller need not compute.
    pub crc64nvme: Option<u64>,
}

impl Fetcher {
    /// Downloads a whole shard and returns its verified, uncompressed bytes: the stored
    /// file's size and one known hash are checked (up to `attempts` downloads on a mismatch),
    /// then it is decompressed to exactly `raw.bytes` and its header must agree with
    /// index.json. Corrupt bytes never leave this function.
    ///
    /// A shard larger than the part size comes as parallel ranged GETs when index.json lists
    /// a hash for it or the store is S3 (whose ETag every part carries and must agree on).
    /// When such a download fails its check, the next attempts repair it part by part
    /// ([`store::refetch_differing_parts`]) instead of downloading it whole again.
    pub fn fetch_shard(&self, shard: usize, attempts: u32) -> Result<Bytes, FetchError> {
        let fresh = |len: usize| vec![0u8; len];
        self.fetch_shard_into::<Vec<u8>, ()>(shard, attempts, &fresh, None)
            .map(|fetched| fetched.raw)
    }

    /// [`Self::fetch_shard`], downloading in parts into buffers `buffer` makes (of the
    /// length asked; the cache's come from its download budget and hold their bytes until
    /// their last user is done).
    ///
    /// With `stage`, the parts of an uncompressed shard downloaded in parts are written to
    /// the sink it makes as they land (on a thread of its own): the sink comes back with the
    /// bytes when they pass every check, with the parts that landed last still to write
    /// ([`StagedParts::write_rest`]), and is dropped when they do not.
    pub fn fetch_shard_into<B: PartBuffer, S: PartSink>(
        &self,
        shard: usize,
        attempts: u32,
        buffer: &dyn Fn(usize) -> B,
        stage: Option<Stager<'_, S>>,
    ) -> Result<FetchedShard<S>, FetchError> {
        let entry = self.shard(shard)?;
        let stage = stage.filter(|_| entry.zip.is_none());
        let stored = entry.stored_file();
        let key = ObjectKey::new(stored.basename.clone())?;
        let url = self.store.url_of(&key);
        let check = cheapest_hash(stored);
        let mut last: Option<Rejected> = None;
        // With no hash in index.json, the store's checksum headers (GCS x-goog-hash, Azure
        // Content-MD5), else the store's MD5 (an S3 ETag) check the transfer. An
        // ETag that is not an MD5 (SSE-KMS, SSE-C) looks the same: then the checksum S3 keeps
        // of the object decides (`asked`); where it keeps none, a mismatch is retried, and
        // two downloads with the same MD5 are taken as the object's true bytes — unless an ETag
        // of this dataset has matched before (then its ETags are MD5s and this is damage).
        let mut previous_md5: Option<[u8; 16]> = None;
        // The store's own checksum of the object, asked once. For a hashless shard on S3 it
        // is asked beside the first download (a HEAD with checksum mode beside the parts):
        // where the store keeps one (S3 computes a CRC64NVME for every upload since December
        // 2024) it is the check, run at memory speed, and once this store has given one the
        // ETag's MD5 is not computed while the parts land. Else the ETag rules below.
        let asked = AskedChecksums::new(self, &key);
        let hashless = check.hashes.is_empty();
        let ask_beside = hashless && asked.worth_asking();
        let md5_while_landing = hashless
            && !self
                .store_checksums_seen
                .load(std::sync::atomic::Ordering::Relaxed);
        let downloads = if check.hashes.is_empty() {
            attempts.max(2)
        } else {
            attempts.max(1)
        };
        let in_parts = self.parts_for(stored);
        let failed = |attempt: u32, reason: &Rejected| {
            add(&self.counters.verify_failures, 1);
            tracing::warn!(shard, url = %url, attempt, %reason, "downloaded shard failed verification");
        };
        // The last download in parts that failed its check, kept to be repaired.
        let mut held: Option<(B, store::EtagMd5s)> = None;
        for attempt in 1..=downloads {
            let repairing = held.is_some();
            let fetch = |held: Option<(B, store::EtagMd5s)>| match held {
                Some((whole, tag)) => self.repair(shard, &key, &check, whole, tag, &asked),
                None if in_parts => self.download_in_parts(
                    &key,
                    stored.bytes,
                    md5_while_landing,
                    &|| asked.answered().is_some(),
                    buffer,
                    stage,
                ),
                None => self.store.get_fetched(&key).map(Download::Whole),
            };
            let fetched = if ask_beside && attempt == 1 {
                std::thread::scope(|s| {
                    let question = s.spawn(|| asked.get());
                    let fetched = fetch(held.take());
                    if question.join().is_err() {
                        tracing::warn!(shard, "asking for the store's checksum panicked");
                    }
                    fetched
                })
            } else {
                fetch(held.take())
            };
            let download = match fetched {
                Ok(d) => d,
                // Rewritten while we read it: like damage, worth another download.
                Err(e @ StoreError::Changed { .. }) => {
                    let reason = Rejected::from(e);
                    failed(attempt, &reason);
                    last = Some(reason);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let checking = std::time::Instant::now();
            if !repairing {
                // A repair counted the parts it fetched again.
                add(&self.counters.bytes_fetched, download.len() as u64);
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
                Ok(None)
            }
            .and_then(|crc| {
                mds::verify_hashes(&check, &download)
                    .map(|()| crc)
                    .map_err(|e| Rejected::Hash(Arc::new(e)))
            });
            let vouched_crc = match stored_ok {
                Ok(crc) => crc,
                Err(reason) => {
                    failed(attempt, &reason);
                    last = Some(reason);
                    if let Download::Parts(whole, tag, _, _) = download {
                        held = Some((whole, tag));
                    }
                    continue;
                }
            };
            let mut download = download;
            let staged = download.take_staged();
            let outcome = unpack(entry, download.freeze()).and_then(|raw| {
                check_header(shard, &url, entry, &raw)
                    .map(|_| raw)
                    .map_err(|e| match e {
                        // The shard and URL are named once, by the error returned below.
                        FetchError::Shard(ShardFault::Corrupt { reason, .. }) => {
                            Rejected::Header(reason)
                        }
                        other => Rejected::Header(other.to_string()),
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
                    return Ok(FetchedShard {
                        raw,
                        staged,
                        // Of the stored bytes: the shard's own only when stored uncompressed.
                        crc64nvme: vouched_crc.filter(|_| entry.zip.is_none()),
                    });
                }
                Err(reason) => {
                    failed(attempt, &reason);
                    last = Some(reason);
                }
            }
        }
        let last = last.map_or_else(String::new, |r| r.to_string());
        Err(ShardFault::Corrupt {
            shard,
            file: url,
            reason: format!("{last} (after {downloads} downloads)"),
        }
        .into())
    }

    /// Whether shard `shard` is downloaded in parts, into a buffer of the caller's
    /// ([`Fetcher::fetch_shard_into`]), of the stored file's size.
    pub fn downloads_in_parts(&self, shard: usize) -> bool {
        self.shard(shard)
            .is_ok_and(|entry| self.parts_for(entry.stored_file()))
    }

    /// Parallel ranged parts need a check that works on ranges: a hash in index.json, or
    /// the S3 ETag every ranged answer carries. GCS and Azure send their checksums only
    /// with whole-object answers, so a hashless shard there comes in one GET.
    fn parts_for(&self, stored: &FileRef) -> bool {
        self.fetch_part_size > 0
            && stored.bytes > self.fetch_part_size
            && (!cheapest_hash(stored).hashes.is_empty() || self.is_s3())
    }

    /// `key` (`size` bytes) as parallel ranged parts, into a buffer `buffer` makes. A
    /// `hashless` shard is checked by its ETag, whose MD5 is computed while the parts arrive;
    /// what arrived with the last part is hashed after. With `stage`, each part is written to
    /// the sink it makes as it lands, on a thread of its own, so the shard is on disk (but
    /// for the parts not begun when the last one lands, left to the caller) when its download
    /// ends.
    fn download_in_parts<B: PartBuffer, S: PartSink>(
        &self,
        key: &ObjectKey,
        size: u64,
        hashless: bool,
        checksum_known: &(dyn Fn() -> bool + Sync),
        buffer: &dyn Fn(usize) -> B,
        stage: Option<Stager<'_, S>>,
    ) -> Result<Download<B, S>, StoreError> {
        let len = usize::try_from(size).map_err(|_| StoreError::Other {
            url: self.store.url_of(key),
            detail: format!("{size} bytes do not fit in memory on this machine"),
        })?;
        let mut whole = buffer(len);
        let mut digest = hashless.then(|| {
            EtagDigest::new(
                size,
                self.part_size.load(std::sync::atomic::Ordering::Relaxed),
            )
        });
        let sink = stage.and_then(|make| make(size));
        let into: &mut [u8] = whole.as_mut();
        // Set once the last part is in: the parts the writer has not begun by then are left
        // to the caller, to write after the check, so that the bytes reach the readers
        // waiting for them without waiting for the disk (on a cold start all of a shard's
        // parts land within a few milliseconds, and writing them took 25-50 ms more).
        let all_landed = std::sync::atomic::AtomicBool::new(false);
        let (tag, staged) = std::thread::scope(|s| {
            let (parts, landed) = std::sync::mpsc::channel::<(u64, &[u8])>();
            let all_landed = &all_landed;
            let writer = sink.map(|mut sink| {
                s.spawn(move || {
                    let mut failed = false;
                    let mut rest = Vec::new();
                    // Every part is taken, written or not, so the download never waits on it.
                    for (at, bytes) in landed {
                        if failed {
                            continue;
                        }
                        if all_landed.load(std::sync::atomic::Ordering::Acquire) {
                            rest.push((at, bytes.len()));
                            continue;
                        }
                        if let Err(e) = sink.write_at(at, bytes) {
                            tracing::debug!(key = %key, at, error = %e, "cannot stage a part as it lands; writing the shard after its check");
                            failed = true;
                        }
                    }
                    (!failed).then_some(StagedParts { sink, rest })
                })
            });
            let mut watch = WhileLanding {
                digest: digest.as_mut(),
                checksum_known,
                parts: writer.is_some().then_some(parts),
            };
            let tag = self.store.run(store::get_in_parts(
                self.store.store().as_ref(),
                key,
                into,
                self.fetch_part_size,
                &mut watch,
            ));
            // The parts the writer has not begun are left to the caller from here on.
            all_landed.store(true, std::sync::atomic::Ordering::Release);
            // Closes the channel: the writer ends with the part it is writing, if any.
            drop(watch);
            let staged = writer.and_then(|w| match w.join() {
                Ok(staged) => staged,
                Err(_) => {
                    tracing::warn!("staging a download panicked; writing it after the check");
                    None
                }
            });
            (tag, staged)
        });
        let tag = tag?;
        let bytes: &[u8] = whole.as_ref();
        // The store's checksum came while the parts landed: it is the check, so the MD5
        // begun before it is dropped unfinished.
        if checksum_known() {
            digest = None;
        }
        let landed = std::time::Instant::now();
        let streamed = digest
            .map(|d| d.finish(&tag, bytes, hashing_threads()))
            .unwrap_or_default();
        tracing::debug!(
            key = %key,
            tail_ms = landed.elapsed().as_millis() as u64,
            staged = staged.is_some(),
            parts_to_write = staged.as_ref().map_or(0, StagedParts::parts_left),
            "download in parts landed; its checksum is done"
        );
        Ok(Download::Parts(whole, tag, streamed, staged))
    }

    /// One more attempt at a shard whose download in parts (`whole`, with the ETag `tag` its
    /// parts agreed on) failed its check: its parts fetched again, the differing ones put in,
    /// until the shard's hash (or the store's checksum of a hashless shard) holds.
    fn repair<B: PartBuffer, S>(
        &self,
        shard: usize,
        key: &ObjectKey,
        check: &FileRef,
        mut whole: B,
        tag: store::EtagMd5s,
        asked: &AskedChecksums<'_>,
    ) -> Result<Download<B, S>, StoreError> {
        let url = self.store.url_of(key);
        let sums = TransferSums {
            md5: tag.0,
            multipart_md5: tag.1,
            store: store::StoreChecksums::default(),
            streamed: Streamed::default(),
        };
        // The check below runs inside the store's runtime, where no request can be sent.
        asked.settle();
        let repair = self.store.run(store::refetch_differing_parts(
            self.store.store().as_ref(),
            key,
            whole.as_mut(),
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
        ))?;
        add(&self.counters.parts_refetched, u64::from(repair.refetched));
        add(&self.counters.bytes_fetched, repair.bytes);
        if repair.verified {
            add(&self.counters.repaired_downloads, 1);
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
}

/// What watches a download's parts land: its ETag digest (fed all but what lands with the
/// last part, which is hashed after the download on several threads) until the store's own
/// checksum has come (`checksum_known`), and the writer of the staged file (`parts`).
struct WhileLanding<'a, 'w> {
    digest: Option<&'a mut EtagDigest>,
    checksum_known: &'a (dyn Fn() -> bool + Sync),
    parts: Option<std::sync::mpsc::Sender<(u64, &'w [u8])>>,
}

impl<'w> store::Landing<'w> for WhileLanding<'_, 'w> {
    fn landed(&mut self, tag: &store::EtagMd5s, at: u64, bytes: &'w [u8], all_in: bool) {
        if let Some(parts) = &self.parts {
            // A writer that ended early has given up staging; nothing to tell it.
            let _ = parts.send((at, bytes));
        }
        if (self.checksum_known)() {
            self.digest = None;
        }
        if let (Some(d), false) = (self.digest.as_mut(), all_in) {
            d.landed(tag, at, bytes);
        }
    }

    fn in_order(&mut self, tag: &store::EtagMd5s, bytes: &'w [u8], all_in: bool) {
        if let (Some(d), false) = (self.digest.as_mut(), all_in) {
            d.in_order(tag, bytes);
        }
    }
}

/// Threads that hash what is left of a download's ETag digest once its last part is in: the
/// machine's cores, at most four.
fn hashing_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// One download of a stored shard file: made in parts into a caller's buffer `B`, or whole
/// by the store's client.
enum Download<B, S> {
    /// Ranged parts written into a caller's buffer, the ETag they agreed on, its digest
    /// computed as they arrived (if it was), and what the caller's stager made of the bytes
    /// (if it ran).
    Parts(B, store::EtagMd5s, Streamed, Option<StagedParts<S>>),
    /// One GET.
    Whole(store::Fetched),
}

impl<B: PartBuffer, S> Download<B, S> {
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

    /// What the stager made of the bytes, taken out.
    fn take_staged(&mut self) -> Option<StagedParts<S>> {
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

impl<B: PartBuffer, S> std::ops::Deref for Download<B, S> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Download::Parts(buffer, _, _, _) => buffer.as_ref(),
            Download::Whole(f) => &f.bytes,
        }
    }
}

/// The raw shard from its verified stored bytes: decompressed, or the bytes themselves.
fn unpack(entry: &ShardEntry, bytes: Bytes) -> Result<Bytes, Rejected> {
    match (&entry.zip, &entry.compression) {
        (Some(_), Some(c)) => mds::decompress(c, &bytes, Some(entry.raw.bytes))
            .map(Bytes::from)
            .map_err(|e| Rejected::Decompress(Arc::new(e))),
        (Some(_), None) => Err(Rejected::NoCompression),
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

    /// Records what it is asked to write.
    #[derive(Default)]
    struct Written(Vec<(u64, Vec<u8>)>);

    impl PartSink for Written {
        fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
            self.0.push((at, bytes.to_vec()));
            Ok(())
        }
    }

    #[test]
    fn the_parts_left_are_written_from_the_checked_bytes_and_none_past_their_end() {
        let stored: Vec<u8> = (0u8..=99).collect();
        let staged = StagedParts {
            sink: Written::default(),
            rest: vec![(40, 30), (90, 10)],
        };
        assert_eq!(staged.parts_left(), 2);
        let sink = staged.write_rest(&stored).unwrap();
        assert_eq!(
            sink.0,
            vec![(40, stored[40..70].to_vec()), (90, stored[90..].to_vec())]
        );
        // A part past the bytes given is an error, not a panic or a short write.
        for rest in [vec![(90, 11)], vec![(u64::MAX, 1)], vec![(1, usize::MAX)]] {
            let staged = StagedParts {
                sink: Written::default(),
                rest,
            };
            assert!(staged.write_rest(&stored).is_err());
        }
    }
}
