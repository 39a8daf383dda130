//! The write side of the S3 operations, for clients that store objects (`shardfs pack` with
//! DEST on a store): PutObject, the multipart upload (CreateMultipartUpload, UploadPart,
//! CompleteMultipartUpload, AbortMultipartUpload) and DeleteObject(s).
//!
//! An object written is kept where the bucket's objects are: a file under the served directory
//! (written to a hidden temporary name beside it, then renamed) or bytes in memory. As on S3,
//! it appears whole and only once its PutObject or CompleteMultipartUpload is done; the parts
//! of an upload wait in memory until then. Keys that cannot be files (empty, `.` or `..`
//! segments) are refused. The link emulation applies to uploads as to downloads: the
//! per-request latency of the accept loop, and the per-connection cap on received bytes
//! ([`super::super::throttle`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use s3s::dto::{ETag, StreamingBlob};
use s3s::{s3_error, S3Result};

use super::{etag_of, Buckets, Data, Entry, EtagMode};

/// S3's smallest part, but for the last one.
const MIN_PART: usize = 5 << 20;
/// S3's highest part number.
const MAX_PART_NUMBER: i32 = 10_000;

/// One multipart upload in progress.
#[derive(Debug)]
struct Upload {
    bucket: String,
    key: String,
    /// Part number → (bytes, ETag).
    parts: BTreeMap<i32, (Bytes, String)>,
}

/// The multipart uploads in progress, by upload id.
#[derive(Debug, Default)]
pub struct Uploads {
    next_id: AtomicU64,
    open: Mutex<HashMap<String, Upload>>,
}

impl Uploads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Upload>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A request body, whole (`len`: its announced length, to allocate once).
async fn collect(body: Option<StreamingBlob>, len: Option<i64>) -> S3Result<Bytes> {
    let Some(mut body) = body else {
        return Ok(Bytes::new());
    };
    let len = len.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let mut out = BytesMut::with_capacity(len.min(1 << 30));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "the body broke off: {e}"))?;
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// Checks a body against the `x-amz-checksum-crc64nvme` it came with (base64 of the
/// big-endian CRC64/NVME), as S3 does: BadDigest when they differ.
fn check_crc64nvme(data: &[u8], sent: Option<&str>) -> S3Result<bool> {
    use base64::Engine;
    let Some(sent) = sent else { return Ok(false) };
    let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, data);
    let ours = base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes());
    if ours != sent {
        return Err(s3_error!(
            BadDigest,
            "the CRC64NVME you specified did not match the calculated checksum"
        ));
    }
    Ok(true)
}

/// Refuses keys that cannot be files under the bucket's folder.
fn check_key(key: &str) -> S3Result<()> {
    if key
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(s3_error!(
            InvalidArgument,
            "this server keeps objects as files: no empty, . or .. key segments"
        ));
    }
    Ok(())
}

/// Writes `parts` one after the other to `path`, whole: a temporary file beside it, then a
/// rename.
fn write_file(path: &Path, parts: &[Bytes], n: u64) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let name = path.file_name().map(|s| s.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{}.upload-{n}", name.unwrap_or_default()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        for p in parts {
            f.write_all(p)?;
        }
        std::fs::rename(&tmp, path)
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The ETag of one part: its MD5 when the server sends S3-like ETags, else opaque.
fn part_etag(data: &[u8], number: i32, mode: EtagMode) -> String {
    use md5::{Digest, Md5};
    if mode == EtagMode::Opaque {
        // No dash (see `EtagMode::Opaque`).
        return format!("{:x}.{number:x}", data.len());
    }
    hex::encode(Md5::digest(data))
}

/// The ETag S3 gives a completed multipart upload: `MD5(MD5(part 1) ‖ …)-N` (None: opaque).
fn upload_etag(part_etags: &[&str], mode: EtagMode) -> Option<Arc<str>> {
    use md5::{Digest, Md5};
    if mode == EtagMode::Opaque {
        return None;
    }
    let mut outer = Md5::new();
    for e in part_etags {
        outer.update(hex::decode(e).unwrap_or_default());
    }
    Some(format!("{}-{}", hex::encode(outer.finalize()), part_etags.len()).into())
}

impl Buckets {
    /// Makes `key` of `bucket` hold the bytes of `parts`, one after the other (a file when the
    /// buckets are a directory's).
    async fn store(
        &self,
        bucket: &str,
        key: &str,
        parts: Vec<Bytes>,
        etag: Option<Arc<str>>,
    ) -> S3Result<ETag> {
        self.has_bucket(bucket)?;
        check_key(key)?;
        let crc64nvme = self.checksum_mode.load(Ordering::Relaxed).then(|| {
            let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme);
            for p in &parts {
                crc.update(p);
            }
            crc.finalize()
        });
        let size = parts.iter().map(|p| p.len() as u64).sum();
        let stored = match &self.root {
            Some(root) => {
                let path: PathBuf = root.join(bucket).join(key);
                let n = self.uploads.next_id.fetch_add(1, Ordering::Relaxed);
                let at = path.clone();
                tokio::task::spawn_blocking(move || write_file(&at, &parts, n))
                    .await
                    .map_err(|e| s3_error!(InternalError, "the write task failed: {e}"))?
                    .map_err(|e| s3_error!(InternalError, "cannot write {key}: {e}"))?;
                Data::File(path.into())
            }
            None if parts.len() == 1 => Data::Memory(parts.into_iter().next().unwrap_or_default()),
            None => Data::Memory(parts.concat().into()),
        };
        let entry = Entry {
            size,
            mtime: SystemTime::now(),
            etag,
            crc64nvme,
            data: stored,
        };
        let tag = super::etag(&entry);
        self.write()
            .entry(bucket.to_string())
            .or_default()
            .insert(key.to_string(), entry);
        Ok(tag)
    }

    /// [`check_crc64nvme`], counted in the stats when a checksum was sent and matched.
    fn checked(&self, data: &[u8], crc64nvme: Option<&str>) -> S3Result<()> {
        if check_crc64nvme(data, crc64nvme)? {
            self.stats.checked_puts.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// PutObject: the body becomes the object (refused when it does not match the
    /// `x-amz-checksum-crc64nvme` sent with it).
    pub(super) async fn put_object_body(
        &self,
        bucket: &str,
        key: &str,
        (body, len): (Option<StreamingBlob>, Option<i64>),
        crc64nvme: Option<&str>,
    ) -> S3Result<ETag> {
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        self.has_bucket(bucket)?;
        check_key(key)?;
        let data = collect(body, len).await?;
        self.stats
            .put_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.checked(&data, crc64nvme)?;
        let etag = etag_of(&data, self.etags);
        self.store(bucket, key, vec![data], etag).await
    }

    /// CreateMultipartUpload: a new upload's id.
    pub(super) fn create_upload(&self, bucket: &str, key: &str) -> S3Result<String> {
        self.stats.other.fetch_add(1, Ordering::Relaxed);
        self.has_bucket(bucket)?;
        check_key(key)?;
        let id = format!(
            "upload{:016x}",
            self.uploads.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let upload = Upload {
            bucket: bucket.to_string(),
            key: key.to_string(),
            parts: BTreeMap::new(),
        };
        self.uploads.lock().insert(id.clone(), upload);
        Ok(id)
    }

    /// UploadPart: keeps part `number` of upload `id` (refused when it does not match the
    /// `x-amz-checksum-crc64nvme` sent with it); returns its ETag.
    pub(super) async fn upload_part(
        &self,
        (bucket, key, id): (&str, &str, &str),
        number: i32,
        (body, len): (Option<StreamingBlob>, Option<i64>),
        crc64nvme: Option<&str>,
    ) -> S3Result<ETag> {
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        let known = |u: &Upload| u.bucket == bucket && u.key == key;
        if !self.uploads.lock().get(id).is_some_and(known) {
            return Err(s3_error!(NoSuchUpload));
        }
        if !(1..=MAX_PART_NUMBER).contains(&number) {
            return Err(s3_error!(
                InvalidArgument,
                "part number {number} is not 1 to 10000"
            ));
        }
        let data = collect(body, len).await?;
        self.stats
            .put_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.checked(&data, crc64nvme)?;
        let etag = part_etag(&data, number, self.etags);
        match self.uploads.lock().get_mut(id) {
            Some(u) => u.parts.insert(number, (data, etag.clone())),
            // Aborted while the part was on its way.
            None => return Err(s3_error!(NoSuchUpload)),
        };
        Ok(ETag::Strong(etag))
    }

    /// CompleteMultipartUpload: the listed parts, in order, become the object. As S3: the
    /// list must be ascending, name parts that were uploaded with their ETags, and every part
    /// but the last must hold at least 5 MiB.
    pub(super) async fn complete_upload(
        &self,
        (bucket, key, id): (&str, &str, &str),
        listed: &[(Option<i32>, Option<ETag>)],
    ) -> S3Result<ETag> {
        self.stats.other.fetch_add(1, Ordering::Relaxed);
        let upload = {
            let mut open = self.uploads.lock();
            match open.get(id) {
                Some(u) if u.bucket == bucket && u.key == key => {}
                _ => return Err(s3_error!(NoSuchUpload)),
            }
            open.remove(id)
        };
        let Some(upload) = upload else {
            return Err(s3_error!(NoSuchUpload));
        };
        if listed.is_empty() {
            return Err(s3_error!(MalformedXML, "no parts listed"));
        }
        let mut data = Vec::new();
        let mut etags = Vec::new();
        let mut last = 0;
        for (i, (number, etag)) in listed.iter().enumerate() {
            let number = number.ok_or_else(|| s3_error!(MalformedXML, "a part has no number"))?;
            if number <= last {
                return Err(s3_error!(InvalidPartOrder));
            }
            last = number;
            let (bytes, stored) = upload
                .parts
                .get(&number)
                .ok_or_else(|| s3_error!(InvalidPart, "part {number} was not uploaded"))?;
            if etag.as_ref().is_some_and(|e| e.value() != stored) {
                return Err(s3_error!(InvalidPart, "part {number}: another ETag"));
            }
            if i + 1 < listed.len() && bytes.len() < MIN_PART {
                return Err(s3_error!(EntityTooSmall, "part {number} is under 5 MiB"));
            }
            data.push(bytes.clone());
            etags.push(stored.as_str());
        }
        let etag = upload_etag(&etags, self.etags);
        self.store(bucket, key, data, etag).await
    }

    /// AbortMultipartUpload: forgets the upload and its parts.
    pub(super) fn abort_upload(&self, bucket: &str, key: &str, id: &str) -> S3Result<()> {
        self.stats.other.fetch_add(1, Ordering::Relaxed);
        let mut open = self.uploads.lock();
        match open.get(id) {
            Some(u) if u.bucket == bucket && u.key == key => {
                open.remove(id);
                Ok(())
            }
            _ => Err(s3_error!(NoSuchUpload)),
        }
    }

    /// DeleteObject (and each key of DeleteObjects): removes the object (and its file); a missing one is no error, as on S3.
    pub(super) async fn delete(&self, bucket: &str, key: &str) -> S3Result<()> {
        self.stats.other.fetch_add(1, Ordering::Relaxed);
        self.has_bucket(bucket)?;
        let removed = self
            .write()
            .get_mut(bucket)
            .and_then(|keys| keys.remove(key));
        if let Some(Entry {
            data: Data::File(path),
            ..
        }) = removed
        {
            let path = path.to_path_buf();
            tokio::task::spawn_blocking(move || std::fs::remove_file(path))
                .await
                .map_err(|e| s3_error!(InternalError, "the delete task failed: {e}"))?
                .or_else(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(s3_error!(InternalError, "cannot delete {key}: {e}")),
                })?;
        }
        Ok(())
    }
}
