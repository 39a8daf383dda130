//! The S3 operations the benchmark's clients use, served from a directory: each subfolder of
//! the root is a bucket, each file below it an object whose key is its relative path.
//!
//! Keys are indexed once at start (the data is written before the server starts), so listings
//! are range scans of a sorted map with real pagination (markers, continuation tokens,
//! delimiters), which s3fs and rclone need for folders of tens of thousands of objects.
//! GET bodies are read with `pread` in 1 MiB chunks on the blocking pool and streamed, so the
//! server is not the bottleneck (the stock s3s-fs streams 4 KiB chunks).

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use s3s::dto::{
    Bucket, CommonPrefix, GetBucketLocationInput, GetBucketLocationOutput, GetObjectInput,
    GetObjectOutput, HeadBucketInput, HeadBucketOutput, HeadObjectInput, HeadObjectOutput,
    ListBucketsInput, ListBucketsOutput, ListObjectsInput, ListObjectsOutput, ListObjectsV2Input,
    ListObjectsV2Output, Object, StreamingBlob, Timestamp,
};
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};

use crate::faults::{FaultKind, Faults};
use crate::stats::Stats;

/// Bytes read from disk and sent as one body chunk.
const CHUNK: u64 = 1 << 20;

/// One object: its size, modification time and, when S3-like ETags were asked for, its ETag.
#[derive(Debug, Clone)]
struct Entry {
    size: u64,
    mtime: SystemTime,
    etag: Option<Arc<str>>,
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
}

/// The part size of `aws s3 cp` (its default multipart_chunksize, also its threshold).
const PART: u64 = 8 << 20;

fn s3_etag(path: &Path, size: u64, mode: EtagMode) -> std::io::Result<Option<Arc<str>>> {
    use md5::{Digest, Md5};
    if mode == EtagMode::Opaque {
        return Ok(None);
    }
    let data = std::fs::read(path)?;
    if mode == EtagMode::Md5 || size <= PART {
        return Ok(Some(hex::encode(Md5::digest(&data)).into()));
    }
    let mut outer = Md5::new();
    let mut parts = 0;
    for part in data.chunks(PART as usize) {
        outer.update(Md5::digest(part));
        parts += 1;
    }
    Ok(Some(
        format!("{}-{parts}", hex::encode(outer.finalize())).into(),
    ))
}

/// Buckets (subfolders of the root) and their sorted keys.
#[derive(Debug)]
pub struct DirStore {
    root: PathBuf,
    buckets: BTreeMap<String, BTreeMap<String, Entry>>,
    stats: Arc<Stats>,
    faults: Arc<Faults>,
}

fn walk(
    dir: &Path,
    prefix: &str,
    mode: EtagMode,
    out: &mut BTreeMap<String, Entry>,
) -> std::io::Result<()> {
    for ent in std::fs::read_dir(dir)? {
        let ent = ent?;
        let name = ent.file_name().to_string_lossy().into_owned();
        let key = format!("{prefix}{name}");
        let meta = ent.metadata()?;
        if meta.is_dir() {
            walk(&ent.path(), &format!("{key}/"), mode, out)?;
        } else if meta.is_file() {
            out.insert(
                key,
                Entry {
                    size: meta.len(),
                    mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    etag: s3_etag(&ent.path(), meta.len(), mode)?,
                },
            );
        }
    }
    Ok(())
}

impl DirStore {
    /// Indexes every bucket folder under `root`.
    pub fn open(
        root: &Path,
        stats: Arc<Stats>,
        etags: EtagMode,
        faults: Arc<Faults>,
    ) -> std::io::Result<DirStore> {
        let mut buckets = BTreeMap::new();
        for ent in std::fs::read_dir(root)? {
            let ent = ent?;
            if ent.metadata()?.is_dir() {
                let mut keys = BTreeMap::new();
                walk(&ent.path(), "", etags, &mut keys)?;
                buckets.insert(ent.file_name().to_string_lossy().into_owned(), keys);
            }
        }
        Ok(DirStore {
            root: root.to_path_buf(),
            buckets,
            stats,
            faults,
        })
    }

    /// How many objects and bytes each bucket holds.
    pub fn summary(&self) -> Vec<(String, usize, u64)> {
        self.buckets
            .iter()
            .map(|(b, keys)| (b.clone(), keys.len(), keys.values().map(|e| e.size).sum()))
            .collect()
    }

    fn bucket(&self, bucket: &str) -> S3Result<&BTreeMap<String, Entry>> {
        self.buckets.get(bucket).ok_or_else(|| {
            self.stats.other.fetch_add(1, Ordering::Relaxed);
            s3_error!(NoSuchBucket)
        })
    }

    fn entry(&self, bucket: &str, key: &str) -> S3Result<Entry> {
        self.bucket(bucket)?
            .get(key)
            .cloned()
            .ok_or_else(|| s3_error!(NoSuchKey))
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
        let keys = self.bucket(bucket)?;
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

/// A body that reads `range` of `path` in `CHUNK`-sized preads on the blocking pool.
/// With `fault`: `Reset` fails before the first byte, `Truncate` after half the bytes,
/// `Corrupt` flips the byte at `corrupt_at` (an offset into the range).
fn body(
    path: PathBuf,
    range: std::ops::Range<u64>,
    stats: Arc<Stats>,
    fault: Option<FaultKind>,
    corrupt_at: u64,
) -> StreamingBlob {
    let total = range.end - range.start;
    let cut = match fault {
        Some(FaultKind::Reset) => Some(range.start),
        Some(FaultKind::Truncate) => Some(range.start + total / 2),
        _ => None,
    };
    let flip =
        (fault == Some(FaultKind::Corrupt) && total > 0).then(|| range.start + corrupt_at % total);
    let file = match std::fs::File::open(&path) {
        Ok(f) => Arc::new(f),
        Err(e) => {
            return StreamingBlob::wrap(futures::stream::once(async move { Err::<Bytes, _>(e) }))
        }
    };
    let stream = futures::stream::unfold(range.start, move |pos| {
        let file = file.clone();
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
            let len = (end - pos).min(CHUNK);
            let len = cut.map_or(len, |c| len.min(c - pos).max(1));
            let read = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; len as usize];
                file.read_exact_at(&mut buf, pos).map(|()| buf)
            })
            .await;
            let chunk = match read {
                Ok(Ok(buf)) => buf,
                Ok(Err(e)) => return Some((Err(e), end)),
                Err(e) => return Some((Err(std::io::Error::other(e)), end)),
            };
            let mut chunk = chunk;
            if let Some(at) = flip.filter(|&at| at >= pos && at < pos + len) {
                chunk[(at - pos) as usize] ^= 0x5a;
            }
            stats.body_bytes.fetch_add(len, Ordering::Relaxed);
            Some((Ok(Bytes::from(chunk)), pos + len))
        }
    });
    StreamingBlob::wrap(stream)
}

fn max_keys(v: Option<i32>) -> usize {
    v.filter(|&m| m > 0)
        .map_or(1000, |m| (m as usize).min(1000))
}

/// The S3 service over a [`DirStore`].
pub struct DirS3(pub Arc<DirStore>);

#[async_trait::async_trait]
impl S3 for DirS3 {
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
        let path = store.root.join(&input.bucket).join(&input.key);
        let fault = store.faults.pick();
        match fault {
            Some(FaultKind::SlowDown) => return Err(s3_error!(SlowDown)),
            Some(FaultKind::Stall) => tokio::time::sleep(store.faults.stall).await,
            _ => {}
        }
        let corrupt_at = store.faults.draw();
        let out = GetObjectOutput {
            content_length: Some((span.end - span.start) as i64),
            content_range: range
                .as_ref()
                .map(|r| format!("bytes {}-{}/{}", r.start, r.end.saturating_sub(1), e.size)),
            e_tag: Some(etag(&e)),
            last_modified: Some(Timestamp::from(e.mtime)),
            body: Some(body(path, span, store.stats.clone(), fault, corrupt_at)),
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
        self.0.stats.heads.fetch_add(1, Ordering::Relaxed);
        let e = self.0.entry(&req.input.bucket, &req.input.key)?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(e.size as i64),
            e_tag: Some(etag(&e)),
            last_modified: Some(Timestamp::from(e.mtime)),
            ..Default::default()
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.0.stats.other.fetch_add(1, Ordering::Relaxed);
        self.0.bucket(&req.input.bucket)?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.0.stats.other.fetch_add(1, Ordering::Relaxed);
        self.0.bucket(&req.input.bucket)?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.0.stats.other.fetch_add(1, Ordering::Relaxed);
        let buckets = self
            .0
            .buckets
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
}
