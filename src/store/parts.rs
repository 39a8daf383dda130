//! `get_in_parts`: one object fetched as parallel ranged GETs of a fixed part size.
//!
//! One TCP connection to an object store rarely carries more than ~100 MB/s, so fast S3
//! clients (the AWS CRT, `aws s3 cp`, Mountpoint) split large objects into 8-16 MiB ranged
//! GETs on several connections. Every part goes through the store's own decorators, so each
//! one is retried, timed out and counted on its own, and the concurrency bound of
//! [`super::ResilientStore`] caps the connections of all parts of all objects together.
//!
//! Each part's body is written straight into its place in one buffer as it arrives, so the
//! object is held once and copied once (a retried part fills the same place again). Each
//! ranged answer carries the object's ETag; when two parts
//! disagree the object was rewritten during the download and [`StoreError::Changed`] says so.
//!
//! `refetch_differing_parts`: a download in parts that failed its check is repaired part by
//! part instead of being fetched again whole.

use super::{EtagMd5s, ObjectKey, Store, StoreError, StoreExt};
use futures::stream::{FuturesUnordered, StreamExt};

/// What a caller of [`get_in_parts`] is shown while the parts of its object land, so that a
/// checksum can run beside the download instead of after it. `tag` is the ETag of the first
/// part to land; `all_in` says whether every part has landed by then (the caller may rather
/// take those last bytes from the buffer after the call, on threads of its own). The bytes
/// shown are borrowed from the caller's buffer for as long as it is (`'w`), so they may be
/// handed to another thread (a writer) while later parts land. When the call fails, what was
/// shown is void.
pub trait Landing<'w> {
    /// A part landed: `bytes` from byte `at` of the object. Parts land in any order, each once.
    fn landed(&mut self, _tag: &EtagMd5s, _at: u64, _bytes: &'w [u8], _all_in: bool) {}

    /// The object's next bytes in order: each part once, as soon as it and every part before
    /// it have landed.
    fn in_order(&mut self, _tag: &EtagMd5s, _bytes: &'w [u8], _all_in: bool) {}
}

/// Shown nothing.
impl Landing<'_> for () {}

/// Fills `whole` with the object `key` (exactly `whole.len()` bytes long) by ranged GETs of
/// `part_size` bytes (the last one shorter), all started at once, each written into its place
/// as its bytes arrive. Returns the ETag-derived MD5s every part agreed on (a ranged answer's
/// checksum headers are the range's, not the object's, and are not used). `watch` is shown
/// each part as it lands and the object's bytes in order (see [`Landing`]).
///
/// The caller owns the buffer, so a daemon can hand the same few shard-sized buffers from
/// download to download instead of mapping fresh memory each time. Every byte of `whole` is
/// written by a part or the call fails: a part that ends short is an error, never a gap
/// holding older bytes.
pub async fn get_in_parts<'w>(
    store: &dyn Store,
    key: &ObjectKey,
    whole: &'w mut [u8],
    part_size: u64,
    watch: &mut dyn Landing<'w>,
) -> Result<EtagMd5s, StoreError> {
    let part_size = usize::try_from(part_size.max(1)).unwrap_or(usize::MAX);
    let mut agreed: Option<EtagMd5s> = None;
    let mut pending = FuturesUnordered::new();
    for (i, dest) in whole.chunks_mut(part_size).enumerate() {
        let at = i.saturating_mul(part_size);
        let range = at as u64..(at + dest.len()) as u64;
        pending.push(async move {
            let got = store.get_part_into(key, range, &mut *dest).await;
            // The part's place comes back with its result: filled, it can be read.
            let filled: &'w [u8] = dest;
            (i, at, got.map(|tag| (tag, filled)))
        });
    }
    // Parts that arrived before one ahead of them, by index; `next` is the first not seen.
    let mut arrived: Vec<Option<&'w [u8]>> = vec![None; pending.len()];
    let mut next = 0;
    while let Some((i, at, part)) = pending.next().await {
        let (tag, bytes) = part?;
        let first = match &agreed {
            None => agreed.insert(tag),
            Some(first) if *first == tag => first,
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
        };
        let all_in = pending.is_empty();
        watch.landed(first, at as u64, bytes, all_in);
        if let Some(slot) = arrived.get_mut(i) {
            *slot = Some(bytes);
        }
        while let Some(b) = arrived.get_mut(next).and_then(Option::take) {
            watch.in_order(first, b, all_in);
            next += 1;
        }
    }
    Ok(agreed.unwrap_or((None, None)))
}

/// What [`refetch_differing_parts`] did to a held download.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PartRepair {
    /// Parts fetched again.
    pub refetched: u32,
    /// Their bytes.
    pub bytes: u64,
    /// Parts whose new bytes differed from the held ones and replaced them.
    pub replaced: u32,
    /// The check accepted the object after a replacement (the repair ended there).
    pub verified: bool,
}

/// At most this many parts that differed between the held download and the repair are kept
/// in both versions, whose combinations are tried (2^(n-1) checks at the n-th such part).
pub const MAX_DIFFERING_PARTS: usize = 3;

/// Repairs `whole`, a download of `key` in parts of `part_size` bytes (as [`get_in_parts`]
/// cut it) that failed its check: the parts are fetched again one at a time, and where a
/// part's new bytes differ from the held ones, `verified` is asked whether the whole object
/// checks out with the new bytes, and with every mix of old and new bytes of the parts that
/// differed so far (up to `MAX_DIFFERING_PARTS`); the first yes ends the repair.
///
/// Damage in transit is rare and lands in one part, so a failed download costs the parts up
/// to the damaged one again, not the whole object; an object whose every download brings some
/// damaged part is still put together from clean ones; and a part damaged in the repair
/// itself is outvoted by its held bytes. A part whose two versions never make the object check
/// out keeps its new bytes (the held ones were part of a whole that failed). Extra memory: one
/// part, plus one per differing part kept. Every answer must carry `tag` (the ETag the held
/// parts agreed on), else the object changed and [`StoreError::Changed`] says so.
pub async fn refetch_differing_parts(
    store: &dyn Store,
    key: &ObjectKey,
    whole: &mut [u8],
    part_size: u64,
    tag: &EtagMd5s,
    mut verified: impl FnMut(&[u8]) -> bool,
) -> Result<PartRepair, StoreError> {
    let part_size = usize::try_from(part_size.max(1)).unwrap_or(usize::MAX);
    let mut repair = PartRepair::default();
    let mut fresh = vec![0u8; part_size.min(whole.len())];
    // Parts that differed: where, and the version not in `whole` now.
    let mut other: Vec<(std::ops::Range<usize>, Vec<u8>)> = Vec::new();
    let mut at = 0usize;
    while at < whole.len() {
        let end = at.saturating_add(part_size).min(whole.len());
        let part = &mut fresh[..end - at];
        let got = store
            .get_part_into(key, at as u64..end as u64, &mut *part)
            .await?;
        repair.refetched += 1;
        repair.bytes += (end - at) as u64;
        if got != *tag {
            return Err(StoreError::Changed {
                url: store.url_of(key),
                detail: format!(
                    "part at byte {at} has ETag {}, the download it repairs {}",
                    describe(&got),
                    describe(tag)
                ),
            });
        }
        if whole[at..end] != part[..] {
            whole[at..end].swap_with_slice(part);
            repair.replaced += 1;
            if verified(whole) {
                repair.verified = true;
                return Ok(repair);
            }
            if other.len() < MAX_DIFFERING_PARTS {
                other.push((at..end, part.to_vec()));
                // The new part's new bytes with every mix of the older differing parts'
                // versions but the one just checked. (Its held bytes with those mixes were
                // checked before it was fetched again, and the held download as a whole
                // failed.) `uses_other` tracks which older parts are swapped.
                let older = other.len() - 1;
                let mut uses_other = vec![false; older];
                for mix in 1..(1u32 << older) {
                    for (j, (range, version)) in other.iter_mut().take(older).enumerate() {
                        let want = mix & (1 << j) != 0;
                        if want != uses_other[j] {
                            whole[range.clone()].swap_with_slice(version);
                            uses_other[j] = want;
                        }
                    }
                    if verified(whole) {
                        repair.verified = true;
                        return Ok(repair);
                    }
                }
                // None holds: back to the newest bytes of every part.
                for (j, (range, version)) in other.iter_mut().take(older).enumerate() {
                    if uses_other[j] {
                        whole[range.clone()].swap_with_slice(version);
                    }
                }
            }
        }
        at = end;
    }
    Ok(repair)
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
    use crate::store::{Fetched, GetOptions, ObjectInfo};
    use bytes::Bytes;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An in-memory object whose ETag changes after `changes_after` ranged reads.
    #[derive(Debug)]
    struct Memory {
        data: Bytes,
        reads: AtomicUsize,
        changes_after: usize,
    }

    impl Gets for Memory {
        fn get(&self, key: &ObjectKey, opts: GetOptions<'_>) -> Result<Fetched, StoreError> {
            let n = self.reads.fetch_add(1, Ordering::SeqCst);
            let version = u8::from(n >= self.changes_after);
            let r = opts.range.clone().unwrap_or(0..self.data.len() as u64);
            let mut answer = Fetched::plain(self.data.slice(r.start as usize..r.end as usize));
            answer.md5 = Some([version; 16]);
            opts.answer(answer, || format!("mem://{key}"))
        }
    }

    fn memory(len: usize, changes_after: usize) -> ServesGets<Memory> {
        ServesGets(Memory {
            data: Bytes::from((0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>()),
            reads: AtomicUsize::new(0),
            changes_after,
        })
    }

    /// An in-memory test object that answers GETs only; [`ServesGets`] makes it a [`Store`].
    pub(super) trait Gets: std::fmt::Debug + Send + Sync + 'static {
        /// Answers a GET of `key`.
        fn get(&self, key: &ObjectKey, opts: GetOptions<'_>) -> Result<Fetched, StoreError>;
    }

    /// A [`Gets`] as a store at `mem://`, its other calls unused.
    #[derive(Debug)]
    pub(super) struct ServesGets<G>(pub G);

    impl<G> std::ops::Deref for ServesGets<G> {
        type Target = G;
        fn deref(&self) -> &G {
            &self.0
        }
    }

    #[async_trait::async_trait]
    impl<G: Gets> Store for ServesGets<G> {
        fn url_of(&self, key: &ObjectKey) -> String {
            format!("mem://{key}")
        }
        async fn head(&self, _key: &ObjectKey) -> Result<ObjectInfo, StoreError> {
            unimplemented!("not used")
        }
        async fn get_opts(
            &self,
            key: &ObjectKey,
            opts: GetOptions<'_>,
        ) -> Result<Fetched, StoreError> {
            self.0.get(key, opts)
        }
        async fn list(&self, _p: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError> {
            unimplemented!("not used")
        }
    }

    /// What a download in parts showed.
    #[derive(Default)]
    struct Seen {
        in_order: Vec<u8>,
        landed: Vec<(u64, Vec<u8>)>,
        all_in_landed: Vec<bool>,
        all_in_in_order: Vec<bool>,
    }

    impl Landing<'_> for Seen {
        fn landed(&mut self, _: &EtagMd5s, at: u64, bytes: &[u8], all_in: bool) {
            self.landed.push((at, bytes.to_vec()));
            self.all_in_landed.push(all_in);
        }

        fn in_order(&mut self, _: &EtagMd5s, bytes: &[u8], all_in: bool) {
            self.in_order.extend_from_slice(bytes);
            self.all_in_in_order.push(all_in);
        }
    }

    #[tokio::test]
    async fn parts_assemble_to_the_object() {
        let key = ObjectKey::new("shard.00000.mds").expect("key");
        for (len, part) in [(1000, 100), (1001, 100), (99, 100), (100, 100), (0, 8)] {
            let m = memory(len, usize::MAX);
            // Stale bytes from an earlier use of the buffer are all overwritten.
            let mut got = vec![0xee; len];
            let mut seen = Seen::default();
            let tag = get_in_parts(&m, &key, &mut got, part, &mut seen)
                .await
                .expect("get");
            assert_eq!(seen.in_order, m.data, "in order, each byte once");
            // Each part landed once, where it belongs.
            let mut landed = seen.landed.clone();
            landed.sort();
            let parts: Vec<(u64, Vec<u8>)> = m
                .data
                .chunks(part as usize)
                .enumerate()
                .map(|(i, b)| (i as u64 * part, b.to_vec()))
                .collect();
            assert_eq!(landed, parts);
            // Told once every part is in, and from then on.
            for all_in in [&seen.all_in_landed, &seen.all_in_in_order] {
                assert!(all_in.windows(2).all(|w| w[0] <= w[1]), "{all_in:?}");
                assert!(len == 0 || all_in.last() == Some(&true));
            }
            assert_eq!(got, m.data, "len {len} part {part}");
            assert_eq!(m.reads.load(Ordering::SeqCst), len.div_ceil(part as usize));
            assert_eq!(tag.0, if len == 0 { None } else { Some([0; 16]) });
        }
    }

    #[tokio::test]
    async fn a_repair_puts_in_differing_parts_until_the_check_holds_and_refuses_a_new_version() {
        let key = ObjectKey::new("shard.00000.mds").expect("key");
        let m = memory(1000, 14);
        let mut whole = vec![0u8; 1000];
        let tag = get_in_parts(&m, &key, &mut whole, 100, &mut ())
            .await
            .expect("get");
        whole[350] ^= 1;
        let truth = m.data.clone();
        let mut checks = 0;
        let r = refetch_differing_parts(&m, &key, &mut whole, 100, &tag, |b| {
            checks += 1;
            b == &truth[..]
        })
        .await
        .expect("repair");
        assert_eq!(
            r,
            PartRepair {
                refetched: 4,
                bytes: 400,
                replaced: 1,
                verified: true
            }
        );
        assert_eq!((checks, &whole[..]), (1, &truth[..]));
        // The object's ETag changes from the 15th read on: the repair says so.
        let err = refetch_differing_parts(&m, &key, &mut whole, 100, &tag, |_| false)
            .await
            .expect_err("changed");
        assert!(matches!(err, StoreError::Changed { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_part_damaged_in_the_repair_itself_is_outvoted_by_its_held_bytes() {
        use crate::store::{Fault, FaultyStore};
        let key = ObjectKey::new("shard.00000.mds").expect("key");
        let m = Arc::new(memory(1000, usize::MAX));
        let truth = m.data.clone();
        let faulty = FaultyStore::new(m.clone());
        // The held download's part 2 is damaged; the repair's new part 0 is too (the first
        // request: a flipped byte in its middle).
        faulty.inject(Fault::Corrupt, None, Some(1));
        let mut whole = truth.to_vec();
        whole[250] ^= 1;
        let mut checks = 0;
        let tag = (Some([0; 16]), None);
        let r = refetch_differing_parts(&faulty, &key, &mut whole, 100, &tag, |b| {
            checks += 1;
            b == &truth[..]
        })
        .await
        .expect("repair");
        assert!(r.verified, "{r:?}");
        assert_eq!((r.refetched, r.replaced), (3, 2));
        // Part 0 new (fails: part 2); part 2 new with part 0 new (fails), then with part 0
        // old: holds. (Part 0 old with part 2 old is the held download: never checked again.)
        assert_eq!(checks, 3);
        assert_eq!(&whole[..], &truth[..]);
        // Damage that no mix of two versions undoes: not verified, newest bytes kept.
        faulty.inject(Fault::Corrupt, None, None);
        let mut whole = truth.to_vec();
        whole[250] ^= 1;
        let r = refetch_differing_parts(&faulty, &key, &mut whole, 100, &tag, |b| b == &truth[..])
            .await
            .expect("repair");
        assert_eq!((r.verified, r.refetched, r.replaced), (false, 10, 10));
        assert_eq!(whole[50], truth[50] ^ 0x5a, "the newest bytes are kept");
    }

    #[tokio::test]
    async fn parts_of_two_versions_are_refused() {
        let key = ObjectKey::new("shard.00000.mds").expect("key");
        let m = memory(1000, 3);
        let err = get_in_parts(&m, &key, &mut [0u8; 1000], 100, &mut ())
            .await
            .expect_err("changed");
        assert!(matches!(err, StoreError::Changed { .. }), "{err}");
        assert!(
            err.to_string().contains("changed during the download"),
            "{err}"
        );
    }
}

#[cfg(test)]
mod retry_tests {
    use super::tests::{Gets, ServesGets};
    use super::*;
    use crate::store::{Fetched, GetOptions, ResilientStore, StoreOptions, TransientKind};
    use bytes::Bytes;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Fails the first attempt at every part after scribbling over its bytes, and records
    /// where each attempt was asked to write.
    #[derive(Debug)]
    struct FailsFirst {
        data: Bytes,
        attempts: Mutex<HashMap<u64, Vec<usize>>>,
    }

    impl Gets for FailsFirst {
        fn get(&self, key: &ObjectKey, opts: GetOptions<'_>) -> Result<Fetched, StoreError> {
            let (Some(r), Some(dest)) = (opts.range, opts.into) else {
                unimplemented!("only parts are asked for")
            };
            {
                let first = {
                    let mut a = self.attempts.lock().expect("lock");
                    let seen = a.entry(r.start).or_default();
                    seen.push(dest.as_ptr() as usize);
                    seen.len() == 1
                };
                if first {
                    dest.fill(0xff);
                    return Err(StoreError::Transient {
                        url: format!("mem://{key}"),
                        kind: TransientKind::Connection,
                        detail: "reset mid-body".into(),
                    });
                }
                dest.copy_from_slice(&self.data[r.start as usize..r.end as usize]);
                Ok(Fetched::plain(Bytes::new()))
            }
        }
    }

    #[tokio::test]
    async fn a_retried_part_fills_its_own_place_again() {
        let data = Bytes::from((0..1000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
        let inner = Arc::new(ServesGets(FailsFirst {
            data: data.clone(),
            attempts: Mutex::new(HashMap::new()),
        }));
        let opts = StoreOptions {
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            ..StoreOptions::default()
        };
        let store = ResilientStore::new(inner.clone(), &opts);
        let key = ObjectKey::new("shard.00000.mds").expect("key");
        let mut got = vec![0u8; 1000];
        get_in_parts(&store, &key, &mut got, 300, &mut ())
            .await
            .expect("get");
        assert_eq!(
            got, data,
            "every part's bytes, none of the failed attempt's"
        );
        let start = got.as_ptr() as usize;
        let attempts = inner.attempts.lock().expect("lock");
        assert_eq!(attempts.len(), 4, "{attempts:?}");
        for (at, ptrs) in attempts.iter() {
            assert_eq!(ptrs.len(), 2, "part {at}: one failure, one retry");
            assert!(
                ptrs.iter().all(|&p| p == start + *at as usize),
                "part {at}: both attempts write into the object's own buffer: {ptrs:?}"
            );
        }
    }
}
