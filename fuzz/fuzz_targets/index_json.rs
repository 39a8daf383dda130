//! Fuzz `index.json` parsing: any bytes must give an index or an error, never a panic; a
//! parsed index must answer `locate` consistently with its sample counts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardfs::mds::Index;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = Index::parse(data) {
        let total = index.num_samples();
        assert_eq!(total, index.shard_samples().iter().sum::<u64>());
        for g in [0, total / 2, total.saturating_sub(1), total] {
            match index.locate(g) {
                Some((s, i)) => {
                    assert!(g < total);
                    assert!(i < index.shards()[s].samples);
                    assert_eq!(index.shard_start(s).unwrap() + u64::from(i), g);
                }
                None => assert!(g >= total),
            }
        }
    }
});
