//! `SampleMap`: where a global sample id lives. Global sample ids number the streams'
//! samples one stream after the other, as StreamingDataset does, and global shard numbers do
//! the same for shards; a sample is found by a binary search over the streams' first ids,
//! then over its stream's shard ends (`mds::Index::locate`).

use crate::mds::Index;
use std::sync::Arc;

/// Where one sample lives, resolved once per read and passed down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The global sample id.
    pub sample: u64,
    /// Its stream (0 for a single-stream mount).
    pub stream: usize,
    /// Its shard's number in its stream's index.json.
    pub shard: usize,
    /// Its shard's global number (across streams).
    pub global_shard: u32,
    /// Its index in the shard.
    pub index: u32,
}

/// One stream's place in the global numbering.
#[derive(Debug)]
struct Span {
    index: Arc<Index>,
    first_sample: u64,
    first_shard: u32,
}

/// The global numbering of samples and shards over every stream of the mount.
#[derive(Debug)]
pub struct SampleMap {
    streams: Vec<Span>,
    num_samples: u64,
    num_shards: u32,
}

impl SampleMap {
    /// The numbering of `indexes`, in stream order.
    pub fn new(indexes: Vec<Arc<Index>>) -> Self {
        let (mut first_sample, mut first_shard) = (0u64, 0u32);
        let mut streams = Vec::with_capacity(indexes.len());
        for index in indexes {
            let (n, k) = (index.num_samples(), index.shards().len() as u32);
            streams.push(Span {
                index,
                first_sample,
                first_shard,
            });
            first_sample += n;
            first_shard += k;
        }
        Self {
            streams,
            num_samples: first_sample,
            num_shards: first_shard,
        }
    }

    /// Samples of every stream (global ids are `0..num_samples`).
    pub fn num_samples(&self) -> u64 {
        self.num_samples
    }

    /// Shards of every stream (global numbers are `0..num_shards`).
    pub fn num_shards(&self) -> usize {
        self.num_shards as usize
    }

    /// Each stream's index.json, in stream order.
    pub fn index(&self, stream: usize) -> Option<&Arc<Index>> {
        self.streams.get(stream).map(|s| &s.index)
    }

    /// The first global shard number of each stream after the first (none while streams
    /// before it have no shards).
    pub fn stream_starts(&self) -> Vec<u32> {
        self.streams
            .iter()
            .skip(1)
            .map(|s| s.first_shard)
            .filter(|&f| f > 0)
            .collect()
    }

    /// Where global sample `sample` lives; `None` past the last sample.
    pub fn locate(&self, sample: u64) -> Option<Location> {
        let stream = self
            .streams
            .partition_point(|s| s.first_sample <= sample)
            .checked_sub(1)?;
        let span = self.streams.get(stream)?;
        let (shard, index) = span.index.locate(sample - span.first_sample)?;
        Some(Location {
            sample,
            stream,
            shard,
            global_shard: span.first_shard + shard as u32,
            index,
        })
    }

    /// The global number of stream `stream`'s first shard.
    pub fn first_shard_of(&self, stream: usize) -> Option<u32> {
        self.streams.get(stream).map(|s| s.first_shard)
    }

    /// (stream, shard in stream) of global shard `shard`.
    pub fn stream_of_shard(&self, shard: u32) -> Option<(usize, usize)> {
        let stream = self
            .streams
            .partition_point(|s| s.first_shard <= shard)
            .checked_sub(1)?;
        let span = self.streams.get(stream)?;
        let local = (shard - span.first_shard) as usize;
        (local < span.index.shards().len()).then_some((stream, local))
    }

    /// Bytes global shard `shard` takes in the cache (its uncompressed size); 0 for none.
    pub fn shard_bytes(&self, shard: u32) -> u64 {
        self.stream_of_shard(shard)
            .and_then(|(s, k)| self.streams[s].index.shards().get(k))
            .map_or(0, |e| e.raw.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_shards_are_numbered_one_stream_after_the_other() {
        let bytes = include_bytes!("../../tests/fixtures/mds/basic/index.json");
        let index = Arc::new(Index::parse(bytes).expect("index"));
        let (n, k) = (index.num_samples(), index.shards().len() as u32);
        assert!(n > 1 && k > 1, "a fixture of several shards");
        let map = SampleMap::new(vec![index.clone(), index.clone()]);
        assert_eq!(
            (map.num_samples(), map.num_shards()),
            (2 * n, 2 * k as usize)
        );
        let last = map.locate(n - 1).expect("last sample of stream 0");
        assert_eq!((last.stream, last.global_shard), (0, k - 1));
        let first = map.locate(n).expect("first sample of stream 1");
        assert_eq!(
            (
                first.sample,
                first.stream,
                first.shard,
                first.global_shard,
                first.index
            ),
            (n, 1, 0, k, 0)
        );
        assert_eq!(map.locate(2 * n), None);
        assert_eq!(map.stream_of_shard(k), Some((1, 0)));
        assert_eq!(map.stream_of_shard(2 * k), None);
        assert_eq!(map.stream_starts(), vec![k]);
        assert_eq!(map.shard_bytes(k + 1), index.shards()[1].raw.bytes);
        assert_eq!(map.shard_bytes(2 * k), 0);
    }
}
