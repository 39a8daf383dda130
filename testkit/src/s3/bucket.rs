//! The S3 operations the clients use, over buckets of objects: each subfolder of a root
//! directory is a bucket, each file below it an object whose key is its relative path (the
//! benchmarks), and objects put in memory (the tests).
//!
//! A directory's keys are indexed once at start (the data is written before the server
//! starts), so listings are range scans of a sorted map with real pagination (markers,
//! continuation tokens, delimiters), which s3fs and rclone need for folders of tens of
//! thousands of objects. GET bodies of files are read with `pread` in 1 MiB chunks on the
//! blocking pool and streamed, so the server is not the bottleneck (the stock s3s-fs streams
//! 4 KiB chunks).
//!
//! Clients may also write ([`writes`]: PutObject, the multipart upload, DeleteObject): into
//! the directory for the benchmarks, in memory for the tests.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, Bucket, ChecksumMode, ChecksumType,
    CommonPrefix, CompleteMultipartUploadInput, CompleteMultipartUploadOutput,
    CreateMultipartUploadInput, CreateMultipartUploadOutput, DeleteObjectInput, DeleteObjectOutput,
    DeleteObjectsInput, DeleteObjectsOutput, DeletedObject, GetBucketLocationInput,
    GetBucketLocationOutput, GetObjectInput, GetObjectOutput, HeadBucketInput, HeadBucketOutput,
    HeadObjectInput, HeadObjectOutput, ListBucketsInput, ListBucketsOutput, ListObjectsInput,
    ListObjectsOutput, ListObjectsV2Input, ListObjectsV2Output, Object, PutObjectInput,
    PutObjectOutput, StreamingBlob, Timestamp, UploadPartInput, UploadPartOutput,
};
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};

use super::faults::{FaultKind, Faults, Rules, ServerFault};
use super::stats::Stats;

mod writes;

/// Bytes read from disk and sent as one body chunk.
const CHUNK: u64 = 1 << 20;

/// One object: its size, modification time, its ETag when S3-like ETags were asked for, and
/// where its bytes are.
#[derive(Debug, Clone)]
struct Entry {
    size: u64,
    mtime: SystemTime,
    etag: Option<Arc<str>>,
    /// The CRC64/NVME S3 keeps of the object (objects put in memory only).
    crc64nvme: Option<u64>,
    data: Data,
}

/// Where an object's bytes are.
#[derive(Debug, Clone)]
enum Data {
    /// A file, read when asked for.
    File(Arc<Path>),
    /// Bytes in memory.
    Memory(Bytes),
}

/// What ETags the server sends (`--etags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EtagMode {
    /// `SIZE.MTIME` in hex: cheap, and (like an SSE-KMS ETag) not an MD5. No dash: clients
    /// that parse `…-N` as a multipart ETag (the AWS CRT under Mountpoint) refuse other dashes.
    Opaque,
    /// The MD5 of the object, as S3 gives a single-part upload without SSE-KMS.
    Md5,
    /// What `aws s3 cp` uploads get: objects over 8 MiB as 8 MiB parts, ETag
    /// `MD5(MD5(part 1) ‖ … ‖ MD5(part N))-N`; smaller objects their MD5.
    Multipart,
    /// What SSE-KMS and SSE-C objects get: 32 hex digits that look like an MD5 but are not
    /// the object's.
    Encrypted,
}

/// The part size of `aws s3 cp` (its default multipart_chunksize, also its threshold).
const PART: u64 = 8 << 20;

/// The ETag (`None`: opaque) and, when `crc` is asked, the CRC64NVME S3 would keep for the
/// file at `path`; the file is read once, and only when one of them needs its bytes.
fn file_sums(
    path: &Path,
    mode: EtagMode,
    crc: bool,
) -> std::io::Result<(Option<Arc<str>>, Option<u64>)> {
    if mode == EtagMode::Opaque && !crc {
        return Ok((None, None));
    }
    let data = std::fs::read(path)?;
    let crc64nvme = crc.then(|| crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &data));
    Ok((etag_of(&data, mode), crc64nvme))
}

/// The ETag S3 would give `data` in `mode` (`None` for opaque ETags).
fn etag_of(data: &[u8], mode: EtagMode) -> Option<Arc<str>> {
    use md5::{Digest, Md5};
    let size = data.len() as u64;
    if mode == EtagMode::Opaque {
        return None;
    }
    if mode == EtagMode::Encrypted {
        let mut md5: [u8; 16] = Md5::digest(data).into();
        md5[0] ^= 0xff;
        return Some(hex::encode(md5).into());
    }
    if mode == EtagMode::Md5 || size <= PART {
        return Some(hex::encode(Md5::digest(data)).into());
    }
    let mut outer = Md5::new();
    let mut parts = 0;
    for part in data.chunks(PART as usize) {
        outer.update(Md5::digest(part));
        parts += 1;
    }
    Some(format!("{}-{parts}", hex::encode(outer.finalize())).into())
}

/// Bucket name → key → object.
type BucketMap = BTreeMap<String, BTreeMap<String, Entry>>;

/// The buckets, their sorted keys, and what the server counts and injects.
#[derive(Debug)]
pub struct Buckets {
    buckets: RwLock<BucketMap>,
    etags: EtagMode,
    /// Requests and bytes served.
    pub stats: Arc<Stats>,
    /// Faults injected at random.
    pub faults: Arc<Faults>,
    /// Faults injected by rule.
    pub rules: Rules,
    /// Answers to fail by closing their connection (a [`ServerFault::Reset`] rule).
    pub resets_pending: AtomicU64,
    /// Whether a HEAD with `x-amz-checksum-mode: ENABLED` gets the object's CRC64NVME (as AWS
    /// S3 answers since December 2024).
    pub checksum_mode: std::sync::atomic::AtomicBool,
    /// Whether unsigned GETs and HEADs are served (a public bucket); signed requests always
    /// are.
    pub public_read: std::sync::atomic::AtomicBool,
    /// The directory whose subfolders are the buckets (objects written go there); None for
    /// buckets in memory.
    root: Option<std::path::PathBuf>,
    /// Multipart uploads in progress.
    uploads: writes::Uploads,
}

fn walk(
    dir: &Path,
    prefix: &str,
    mode: EtagMode,
    crc: bool,
    out: &mut BTreeMap<String, Entry>,
) -> std::io::Result<()> {
    for ent in std::fs::read_dir(dir)? {
        let ent = ent?;
        let name = ent.file_name().to_string_lossy().into_owned();
        let key = format!("{prefix}{name}");
        let meta = ent.metadata()?;
        if meta.is_dir() {
            walk(&ent.path(), &format!("{key}/"), mode, crc, out)?;
        } else if meta.is_file() {
            let (etag, crc64nvme) = file_sums(&ent.path(), mode, crc)?;
            out.insert(
                key,
                Entry {
                    size: meta.len(),
                    mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    etag,
                    crc64nvme,
                    data: Data::File(ent.path().into()),
                },
            );
        }
    }
    Ok(())
}

impl Buckets {
    /// No buckets yet (see [`Buckets::put`]).
    pub fn new(stats: Arc<Stats>, etags: EtagMode, faults: Arc<Faults>) -> Buckets {
        Buckets {
            buckets: RwLock::new(BTreeMap::new()),
            etags,
            stats,
            faults,
            rules: Rules::default(),
            resets_pending: AtomicU64::new(0),
            checksum_mode: std::sync::atomic::AtomicBool::new(false),
            public_read: std::sync::atomic::AtomicBool::new(false),
            root: None,
            uploads: writes::Uploads::default(),
        }
    }

    /// Indexes every bucket folder under `root`. With `checksums`, every object gets the
    /// full-object CRC64NVME S3 keeps for it (each file read once at start) and a HEAD with
    /// checksum mode is answered with it, as S3 does; without, the store is ETag-only.
    pub fn open(
        root: &Path,
        stats: Arc<Stats>,
        etags: EtagMode,
        faults: Arc<Faults>,
        checksums: bool,
    ) -> std::io::Result<Buckets> {
        let mut out = Buckets::new(stats, etags, faults);
        out.root = Some(root.to_path_buf());
        out.checksum_mode
            .store(checksums, std::sync::atomic::Ordering::Relaxed);
        {
            let mut buckets = out.write();
            for ent in std::fs::read_dir(root)? {
                let ent = ent?;
                if ent.metadata()?.is_dir() {
                    let mut keys = BTreeMap::new();
                    walk(&ent.path(), "", etags, checksums, &mut keys)?;
                    buckets.insert(ent.file_name().to_string_lossy().into_owned(), keys);
                }
            }
        }
        Ok(out)
    }

    fn read(&self) -> RwLockReadGuard<'_, BucketMap> {
        self.buckets.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BucketMap> {
        self.buckets.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `data` in memory as `key` of `bucket` (made if new), replacing what was there.
    pub fn put(&self, bucket: &str, key: &str, data: Bytes) {
        let entry = Entry {
            size: data.len() as u64,
            mtime: SystemTime::now(),
            etag: etag_of(&data, self.etags),
            crc64nvme: Some(crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &data)),
            data: Data::Memory(data),
        };
        self.write()
            .entry(bucket.to_string())
            .or_default()
            .insert(key.to_string(), entry);
    }

    /// How many objects and bytes each bucket holds.
    pub fn summary(&self) -> Vec<(String, usize, u64)> {
        self.read()
            .iter()
            .map(|(b, keys)| (b.clone(), keys.len(), keys.values().map(|e| e.size).sum()))
            .collect()
    }

    fn no_bucket(&self) -> s3s::S3Error {
        self.stats.other.fetch_add(1, Ordering::Relaxed);
        s3_error!(NoSuchBucket)
    }

    fn has_bucket(&self, bucket: &str) -> S3Result<()> {
        if self.read().contains_key(bucket) {
            Ok(())
        } else {
            Err(self.no_bucket())
        }
    }

    fn entry(&self, bucket: &str, key: &str) -> S3Result<Entry> {
        let buckets = self.read();
        let keys = buckets.get(bucket).ok_or_else(|| self.no_bucket())?;
        keys.get(key).cloned().ok_or_else(|| s3_error!(NoSuchKey))
    }

    /// Waits and fails as the rules for `key` say; returns the bandwidth cap and the fault
    /// left for the body (truncation, corruption).
    async fn apply_rules(&self, key: &str) -> S3Result<(Option<u64>, Option<ServerFault>)> {
        let d = self.rules.decide(key);
        if !d.delay.is_zero() {
            tokio::time::sleep(d.delay).await;
        }
        match d.fault {
            Some(ServerFault::SlowDown) => Err(slow_down()),
            Some(ServerFault::InternalError) => Err(s3_error!(InternalError, "injected")),
            Some(ServerFault::AccessDenied) => Err(s3_error!(AccessDenied, "injected")),
            Some(ServerFault::Reset) => {
                self.resets_pending.fetch_add(1, Ordering::Relaxed);
                Err(s3_error!(InternalError, "reset"))
            }
            other => Ok((d.bandwidth, other)),
        }
    }

    /// One listing page: keys after `after` under `prefix`, folded at `delimiter`.
    fn list(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        max_keys: usize,
    ) -> S3Result<ListPage> {
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        let buckets = self.read();
        let keys = buckets.get(bucket).ok_or_else(|| self.no_bucket())?;
        let start = match after {
            Some(a) if a >= prefix => std::ops::Bound::Excluded(a.to_string()),
            _ => std::ops::Bound::Included(prefix.to_string()),
        };
        let mut page = ListPage::default();
        let mut count = 0usize;
        for (key, e) in keys.range((start, std::ops::Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            let folded = delimiter
                .filter(|d| !d.is_empty())
                .and_then(|d| key[prefix.len()..].find(d).map(|i| (i, d.len())))
                .map(|(i, dl)| &key[..prefix.len() + i + dl]);
            if let Some(cp) = folded {
                if page.prefixes.last().map(String::as_str) == Some(cp) {
                    continue;
                }
                if count == max_keys {
                    page.truncated = true;
                    break;
                }
                page.prefixes.push(cp.to_string());
                page.last = Some(format!("{cp}\u{10ffff}"));
            } else {
                if count == max_keys {
                    page.truncated = true;
                    break;
                }
                page.objects.push(Object {
                    key: Some(key.clone()),
                    size: Some(e.size as i64),
                    e_tag: Some(etag(e)),
                    last_modified: Some(Timestamp::from(e.mtime)),
                    ..Default::default()
                });
                page.last = Some(key.clone());
            }
            count += 1;
        }
        Ok(page)
    }
}

#[derive(Debug, Default)]
struct ListPage {
    objects: Vec<Object>,
    prefixes: Vec<String>,
    truncated: bool,
    /// Where the next page starts (after this key).
    last: Option<String>,
}

impl ListPage {
    fn common_prefixes(&self) -> Option<Vec<CommonPrefix>> {
        Some(
            self.prefixes
                .iter()
                .map(|p| CommonPrefix {
                    prefix: Some(p.clone()),
                })
                .collect(),
        )
    }
}

/// Size and mtime, not an MD5: clients that verify MD5 ETags (rclone, shardfs) see it is not
/// 32 hex digits and skip it.
fn etag(e: &Entry) -> s3s::dto::ETag {
    if let Some(t) = &e.etag {
        return s3s::dto::ETag::Strong(t.to_string());
    }
    let nanos = e
        .mtime
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos();
    s3s::dto::ETag::Strong(format!("{:x}.{:x}", e.size, nanos))
}

/// What goes wrong with a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFault {
    /// Fails before the first byte.
    Reset,
    /// Fails after half the bytes.
    Truncate,
    /// Flips one byte: this offset into the range, modulo its length.
    Corrupt(u64),
}

/// Bytes of a body sent at once when its bandwidth is capped (64 KiB at 100 KB/s is 0.65 s).
const PACED_CHUNK: u64 = 64 << 10;

/// An object's bytes, ready to be read: a file opened once per body, or memory.
#[derive(Clone)]
enum Source {
    File(Arc<std::fs::File>),
    Memory(Bytes),
}

impl Source {
    fn open(data: Data) -> std::io::Result<Source> {
        Ok(match data {
            Data::File(path) => Source::File(Arc::new(std::fs::File::open(&*path)?)),
            Data::Memory(b) => Source::Memory(b),
        })
    }

    /// `len` bytes at `pos` (a file's on the blocking pool).
    async fn read_at(&self, pos: u64, len: u64) -> std::io::Result<Bytes> {
        match self {
            Source::Memory(b) => Ok(b.slice(pos as usize..(pos + len) as usize)),
            Source::File(file) => {
                let file = file.clone();
                tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; len as usize];
                    file.read_exact_at(&mut buf, pos).map(|()| Bytes::from(buf))
                })
                .await
                .map_err(std::io::Error::other)?
            }
        }
    }
}

/// A body that streams `range` of `data` in chunks (`CHUNK`, or `PACED_CHUNK` paced to
/// `bandwidth` bytes per second), with `fault` if any.
fn body(
    data: Data,
    range: std::ops::Range<u64>,
    stats: Arc<Stats>,
    fault: Option<BodyFault>,
    bandwidth: Option<u64>,
) -> StreamingBlob {
    let total = range.end - range.start;
    let cut = match fault {
        Some(BodyFault::Reset) => Some(range.start),
        Some(BodyFault::Truncate) => Some(range.start + total / 2),
        _ => None,
    };
    let flip = match fault {
        Some(BodyFault::Corrupt(at)) if total > 0 => Some(range.start + at % total),
        _ => None,
    };
    let chunk = if bandwidth.is_some() {
        PACED_CHUNK
    } else {
        CHUNK
    };
    let source = match Source::open(data) {
        Ok(s) => s,
        Err(e) => {
            return StreamingBlob::wrap(futures::stream::once(async move { Err::<Bytes, _>(e) }))
        }
    };
    let stream = futures::stream::unfold(range.start, move |pos| {
        let source = source.clone();
        let stats = stats.clone();
        let end = range.end;
        async move {
            if pos >= end {
                return None;
            }
            if cut.is_some_and(|c| pos >= c) {
                let e = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected fault");
                return Some((Err(e), end));
            }
            let len = (end - pos).min(chunk);
            let len = cut.map_or(len, |c| len.min(c - pos).max(1));
            if let Some(rate) = bandwidth {
                tokio::time::sleep(Duration::from_secs_f64(len as f64 / rate.max(1) as f64)).await;
            }
            let bytes = match source.read_at(pos, len).await {
                Ok(b) => b,
                Err(e) => return Some((Err(e), end)),
            };
            let bytes = match flip.filter(|&at| at >= pos && at < pos + len) {
                Some(at) => {
                    let mut v = bytes.to_vec();
                    v[(at - pos) as usize] ^= 0x5a;
                    Bytes::from(v)
                }
                None => bytes,
            };
            stats.body_bytes.fetch_add(len, Ordering::Relaxed);
            Some((Ok(bytes), pos + len))
        }
    });
    StreamingBlob::wrap(stream)
}

/// The S3 error S3 sends under load (HTTP 503, s3s's status for `SlowDown`).
fn slow_down() -> s3s::S3Error {
    s3_error!(SlowDown, "Please reduce your request rate.")
}

fn max_keys(v: Option<i32>) -> usize {
    v.filter(|&m| m > 0)
        .map_or(1000, |m| (m as usize).min(1000))
}

/// The S3 service over [`Buckets`].
pub struct BucketsS3(pub Arc<Buckets>);

#[async_trait::async_trait]
impl S3 for BucketsS3 {
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let store = &self.0;
        let input = req.input;
        store.stats.gets.fetch_add(1, Ordering::Relaxed);
        let e = store.entry(&input.bucket, &input.key)?;
        let range = match &input.range {
            Some(r) => {
                store.stats.range_gets.fetch_add(1, Ordering::Relaxed);
                Some(r.check(e.size).map_err(|_| s3_error!(InvalidRange))?)
            }
            None => None,
        };
        let span = range.clone().unwrap_or(0..e.size);
        store.stats.see(&input.key, |s| match range {
            Some(_) => s.range_gets += 1,
            None => s.gets += 1,
        });
        // Rules first (tests), then the random faults (soak).
        let (bandwidth, ruled) = store.apply_rules(&input.key).await?;
        let fault = match ruled {
            Some(ServerFault::Truncate) => Some(BodyFault::Truncate),
            Some(ServerFault::Corrupt) => Some(BodyFault::Corrupt((span.end - span.start) / 2)),
            _ => {
                let picked = store.faults.pick();
                let corrupt_at = store.faults.draw();
                match picked {
                    Some(FaultKind::SlowDown) => return Err(slow_down()),
                    Some(FaultKind::Stall) => {
                        tokio::time::sleep(store.faults.stall).await;
                        None
                    }
                    Some(FaultKind::Reset) => Some(BodyFault::Reset),
                    Some(FaultKind::Truncate) => Some(BodyFault::Truncate),
                    Some(FaultKind::Corrupt) => Some(BodyFault::Corrupt(corrupt_at)),
                    None => None,
                }
            }
        };
        store
            .stats
            .see(&input.key, |s| s.bytes += span.end - span.start);
        let out = GetObjectOutput {
            content_length: Some((span.end - span.start) as i64),
            content_range: range
                .as_ref()
                .map(|r| format!("bytes {}-{}/{}", r.start, r.end.saturating_sub(1), e.size)),
            e_tag: Some(etag(&e)),
            last_modified: Some(Timestamp::from(e.mtime)),
            body: Some(body(e.data, span, store.stats.clone(), fault, bandwidth)),
            ..Default::default()
        };
        Ok(if range.is_some() {
            S3Response::with_status(out, http::StatusCode::PARTIAL_CONTENT)
        } else {
            S3Response::new(out)
        })
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let store = &self.0;
        store.stats.heads.fetch_add(1, Ordering::Relaxed);
        let e = store.entry(&req.input.bucket, &req.input.key)?;
        store.stats.see(&req.input.key, |s| s.heads += 1);
        store.apply_rules(&req.input.key).await?;
        let asked = req
            .input
            .checksum_mode
            .as_ref()
            .is_some_and(|m| m.as_str() == ChecksumMode::ENABLED);
        let crc64nvme = e
            .crc64nvme
            .filter(|_| asked && store.checksum_mode.load(Ordering::Relaxed));
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(e.size as i64),
            e_tag: Some(etag(&e)),
            last_modified: Some(Timestamp::from(e.mtime)),
            checksum_crc64nvme: crc64nvme.map(|c| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.encode(c.to_be_bytes())
            }),
            checksum_type: crc64nvme.map(|_| ChecksumType::from_static(ChecksumType::FULL_OBJECT)),
            ..Default::default()
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.0.stats.other.fetch_add(1, Ordering::Relaxed);
        self.0.has_bucket(&req.input.bucket)?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.0.stats.other.fetch_add(1, Ordering::Relaxed);
        self.0.has_bucket(&req.input.bucket)?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.0.stats.other.fetch_add(1, Ordering::Relaxed);
        let buckets = self
            .0
            .read()
            .keys()
            .map(|b| Bucket {
                name: Some(b.clone()),
                creation_date: Some(Timestamp::from(SystemTime::UNIX_EPOCH)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = max_keys(input.max_keys);
        let page = self.0.list(
            &input.bucket,
            &prefix,
            input.delimiter.as_deref(),
            input.marker.as_deref(),
            max,
        )?;
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            marker: input.marker,
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            next_marker: page.truncated.then(|| page.last.clone()).flatten(),
            common_prefixes: page.common_prefixes(),
            contents: Some(page.objects),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = max_keys(input.max_keys);
        let after = input
            .continuation_token
            .as_deref()
            .or(input.start_after.as_deref());
        let page = self.0.list(
            &input.bucket,
            &prefix,
            input.delimiter.as_deref(),
            after,
            max,
        )?;
        let key_count = (page.objects.len() + page.prefixes.len()) as i32;
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            max_keys: Some(max as i32),
            key_count: Some(key_count),
            continuation_token: input.continuation_token,
            start_after: input.start_after,
            is_truncated: Some(page.truncated),
            next_continuation_token: page.truncated.then(|| page.last.clone()).flatten(),
            common_prefixes: page.common_prefixes(),
            contents: Some(page.objects),
            ..Default::default()
        }))
    }
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let i = req.input;
        let e_tag = self
            .0
            .put_object_body(
                &i.bucket,
                &i.key,
                (i.body, i.content_length),
                i.checksum_crc64nvme.as_deref(),
            )
            .await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(e_tag),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let i = req.input;
        let id = self.0.create_upload(&i.bucket, &i.key)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let i = req.input;
        let upload = (i.bucket.as_str(), i.key.as_str(), i.upload_id.as_str());
        let body = (i.body, i.content_length);
        let crc64nvme = i.checksum_crc64nvme.as_deref();
        let e_tag = self
            .0
            .upload_part(upload, i.part_number, body, crc64nvme)
            .await?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(e_tag),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let i = req.input;
        let listed: Vec<_> = i
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.part_number, p.e_tag))
            .collect();
        let upload = (i.bucket.as_str(), i.key.as_str(), i.upload_id.as_str());
        let e_tag = self.0.complete_upload(upload, &listed).await?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            e_tag: Some(e_tag),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let i = req.input;
        self.0.abort_upload(&i.bucket, &i.key, &i.upload_id)?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.0.delete(&req.input.bucket, &req.input.key).await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let i = req.input;
        let mut deleted = Vec::new();
        for o in i.delete.objects {
            self.0.delete(&i.bucket, &o.key).await?;
            deleted.push(DeletedObject {
                key: Some(o.key),
                ..Default::default()
            });
        }
        let quiet = i.delete.quiet == Some(true);
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: (!quiet).then_some(deleted),
            ..Default::default()
        }))
    }
}
