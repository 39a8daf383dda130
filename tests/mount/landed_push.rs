//! The files of a shard that lands from the store, handed to the kernel's page cache before
//! the reader of a listed folder asks for them: their bytes are the right ones, their reads
//! never reach the daemon, and the readahead still follows the reader.

use super::{Expected, Mount};
use crate::common::fixtures;

/// `shardfs::vfs`'s marks: every this many positions a sample is read through the daemon.
const MARK_EVERY: u64 = 16;

#[test]
fn a_cold_epoch_read_in_order_finds_most_files_in_the_page_cache() {
    let dir = fixtures().join("mds/basic");
    let exp = Expected::load(&dir);
    let m = Mount::new(dir.to_str().unwrap(), &[]);
    let epoch = m.mnt.join("rank-0/epoch-0");
    // A loader lists its cold folder (no sizes known: placeholders), then reads every file
    // in order.
    let names = m.list("rank-0/epoch-0");
    let mut files = 0u64;
    for n in &names {
        let g: u64 = n.split('.').next().unwrap().parse().unwrap();
        let want = exp
            .files(g)
            .into_iter()
            .find(|(suffix, _)| n.ends_with(suffix.as_str()))
            .unwrap()
            .1;
        let got = std::fs::read(epoch.join(n)).unwrap();
        assert_eq!(got, want, "{n}");
        if !want.is_empty() {
            files += 1;
        }
    }
    let s = m.status();
    let pushed = s["landed_pushes"]["files"].as_u64().unwrap();
    let through_daemon = s["readahead"]["ranks"][0]["requests"].as_u64().unwrap();
    let samples = exp.index.num_samples();
    assert!(pushed > files / 2, "{pushed} of {files} files handed over");
    assert!(
        through_daemon < files / 3,
        "{through_daemon} of {files} files read through the daemon"
    );
    // The marks still come through: the readahead's cursor reached the last samples.
    let cursor = s["readahead"]["ranks"][0]["cursor"].as_u64().unwrap();
    assert!(
        cursor + 2 * MARK_EVERY >= samples,
        "cursor {cursor} of {samples} samples"
    );
    assert_eq!(s["landed_pushes"]["refused"], 0);
    assert_eq!(s["errors"]["count"], 0);
}
