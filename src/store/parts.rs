//! `get_in_parts`: one object fetched as parallel ranged GETs of a fixed part size.
//!
//! One TCP connection to an object store rarely carries more than ~100 MB/s, so fast S3
//! clients (the AWS CRT, `aws s3 cp`, Mountpoint) split large objects into 8-16 MiB ranged
//! GETs on several connections. Every part goes through the store's own decorators, so each
//! one is retried, timed out and counted on its own, and the concurrency bound of
//! [`super::ResilientStore`] caps the connections of all parts of all objects together.
//!
//! Each part's body is written straight into its place in one buffer as it arrives, so the
//! object is held once and copied once (a retried part lands in a buffer of its own and is
//! copied into place when the parts are joined). Each ranged answer carries the object's ETag; when two parts
//! disagree the object was rewritten during the download and [`StoreError::Changed`] says so.

use super::{EtagMd5s, Fetched, ObjectKey, Store, StoreChecksums, StoreError};
use bytes::BytesMut;
use futures::stream::{FuturesUnordered, StreamExt};

/// The whole object `key` of `size` bytes, as ranged GETs of `part_size` bytes (the last one
/// shorter) all started at once, each written into its place in one buffer as its bytes
/// arrive. The result carries the ETag-derived MD5s every part agreed on, and no header
/// checksums (those of a range are not the object's).
pub async fn get_in_parts(
    store: &dyn Store,
    key: &ObjectKey,
    size: u64,
    part_size: u64,
) -> Result<Fetched, StoreError> {
    let part_size = usize::try_from(part_size.max(1)).unwrap_or(usize::MAX);
    let len = usize::try_from(size).map_err(|_| StoreError::Other {
        url: store.url_of(key),
        detail: format!("{size} bytes do not fit in memory on this machine"),
    })?;
    // One allocation cut into the parts' places; reassembled without copying below.
    let mut rest = BytesMut::zeroed(len);
    let mut pending = FuturesUnordered::new();
    let mut start = 0usize;
    let mut index = 0usize;
    while !rest.is_empty() {
        let dest = rest.split_to(part_size.min(rest.len()));
        let range = start as u64..(start + dest.len()) as u64;
        let i = index;
        start += dest.len();
        index += 1;
        pending.push(async move { (i, range.start, store.get_part_into(key, range, dest).await) });
    }
    let mut parts: Vec<Option<BytesMut>> = (0..index).map(|_| None).collect();
    let mut agreed: Option<EtagMd5s> = None;
    while let Some((i, at, part)) = pending.next().await {
        let (bytes, tag) = part?;
        match &agreed {
            None => agreed = Some(tag),
            Some(first) if *first == tag => {}
            Some(first) => {
                return Err(StoreError::Changed {
                    url: store.url_of(key),
                    detail: format!(
                        "part at byte {at} has ETag {}, an earlier part {}",
                        describe(&tag),
                        describe(first)
                    ),
                })
            }
        }
        if let Some(slot) = parts.get_mut(i) {
            *slot = Some(bytes);
        }
    }
    let mut whole = BytesMut::new();
    for part in parts.into_iter().flatten() {
        // O(1) for parts still in their place; a part a retry refilled elsewhere is copied.
        whole.unsplit(part);
    }
    if whole.len() != len {
        return Err(StoreError::ShortBody {
            url: store.url_of(key),
            expected: size,
            got: whole.len() as u64,
        });
    }
    let (md5, multipart_md5) = agreed.unwrap_or((None, None));
    Ok(Fetched {
        bytes: whole.freeze(),
        md5,
        multipart_md5,
        store_sums: StoreChecksums::default(),
    })
}

fn describe(tag: &EtagMd5s) -> String {
    match tag {
        (Some(m), _) => hex::encode(m),
        (None, Some((m, n))) => format!("{}-{n}", hex::encode(m)),
        (None, None) => "(none)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ObjectInfo, StoreFuture};
    use bytes::Bytes;
    use std::ops::Range;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An in-memory object whose ETag changes after `changes_after` ranged reads.
    #[derive(Debug)]
    struct Memory {
        data: Bytes,
        reads: AtomicUsize,
        changes_after: usize,
    }

    impl Store for Memory {
        fn url_of(&self, key: &ObjectKey) -> String {
            format!("mem://{key}")
        }
        fn head<'a>(&'a self, _key: &'a ObjectKey) -> StoreFuture<'a, ObjectInfo> {
            unimplemented!("not used")
        }
        fn get_range<'a>(&'a self, _k: &'a ObjectKey, r: Range<u64>) -> StoreFuture<'a, Bytes> {
            Box::pin(async move { Ok(self.data.slice(r.start as usize..r.end as usize)) })
        }
        fn get<'a>(&'a self, _key: &'a ObjectKey) -> StoreFuture<'a, Bytes> {
            Box::pin(async move { Ok(self.data.clone()) })
        }
        fn get_part_into<'a>(
            &'a self,
            _key: &'a ObjectKey,
            r: Range<u64>,
            mut dest: BytesMut,
        ) -> StoreFuture<'a, (BytesMut, EtagMd5s)> {
            Box::pin(async move {
                let n = self.reads.fetch_add(1, Ordering::SeqCst);
                let version = u8::from(n >= self.changes_after);
                dest.copy_from_slice(&self.data[r.start as usize..r.end as usize]);
                Ok((dest, (Some([version; 16]), None)))
            })
        }
        fn list<'a>(&'a self, _p: Option<&'a ObjectKey>) -> StoreFuture<'a, Vec<ObjectInfo>> {
            unimplemented!("not used")
        }
    }

    fn memory(len: usize, changes_after: usize) -> Memory {
        Memory {
            data: Bytes::from((0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>()),
            reads: AtomicUsize::new(0),
            changes_after,
        }
    }

    #[tokio::test]
    async fn parts_assemble_to_the_object() {
        let key = ObjectKey::new("shard.00000.mds").expect("key");
        for (len, part) in [(1000, 100), (1001, 100), (99, 100), (100, 100), (0, 8)] {
            let m = memory(len, usize::MAX);
            let got = get_in_parts(&m, &key, len as u64, part).await.expect("get");
            assert_eq!(got.bytes, m.data, "len {len} part {part}");
            assert_eq!(m.reads.load(Ordering::SeqCst), len.div_ceil(part as usize));
            assert_eq!(got.md5, if len == 0 { None } else { Some([0; 16]) });
        }
    }

    #[tokio::test]
    async fn parts_of_two_versions_are_refused() {
        let key = ObjectKey::new("shard.00000.mds").expect("key");
        let m = memory(1000, 3);
        let err = get_in_parts(&m, &key, 1000, 100)
            .await
            .expect_err("changed");
        assert!(matches!(err, StoreError::Changed { .. }), "{err}");
        assert!(
            err.to_string().contains("changed during the download"),
            "{err}"
        );
    }
}
