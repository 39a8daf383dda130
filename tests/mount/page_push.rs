//! A sample's other files handed to the kernel's page cache when its first file is read: their
//! reads then never reach the daemon, their bytes are the right ones, and columns nobody reads
//! are not handed over.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{Expected, Mount};
use crate::common::fixtures;

/// `shardfs::vfs`'s learning pause: first reads during which nothing is handed over.
const LEARN: u64 = 128;

fn reads(m: &Mount) -> u64 {
    m.status()["readahead"]["ranks"][0]["requests"]
        .as_u64()
        .unwrap()
}

fn pushed(m: &Mount) -> u64 {
    m.status()["page_cache_pushes"]["files"].as_u64().unwrap()
}

/// The epoch folder's names grouped by position (one rank, no shuffle: position g is sample g),
/// each group in name order (the order its columns' files are read). With `stat`, after a
/// `stat` of each, so the kernel holds every inode with its size; without, as a loader that
/// lists a cold epoch and opens the files later (the listing gave placeholders, so each file
/// is looked up when it is opened).
fn files_by_sample(m: &Mount, epoch: &Path, stat: bool) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut last = None;
    for n in m.list("rank-0/epoch-0") {
        if stat {
            std::fs::metadata(epoch.join(&n)).unwrap();
        }
        let pos = n.split('.').next().unwrap().to_string();
        if last.as_ref() != Some(&pos) {
            out.push(Vec::new());
            last = Some(pos);
        }
        out.last_mut().unwrap().push(n);
    }
    out
}

/// A mount of `dir` whose files reach the page cache only as a sample's other files (the
/// files of landed shards are not handed over: tests/mount/landed_push.rs).
fn sibling_push_alone(dir: &Path) -> Mount {
    Mount::with_env(
        dir.to_str().unwrap(),
        &[],
        &[("SHARDFS_PUSH_LANDED", "off")],
    )
}

/// The expected bytes of file `name` of sample `g`.
fn expected(exp: &Expected, g: u64, name: &str) -> Vec<u8> {
    exp.files(g)
        .into_iter()
        .find(|(suffix, _)| name.ends_with(suffix.as_str()))
        .unwrap()
        .1
}

#[test]
fn a_samples_other_files_are_in_the_page_cache_once_its_first_is_read() {
    others_are_handed_over(true);
}

/// On a cold epoch the listing knew no sizes: the look-up of a handed-over file, when it is
/// opened, must not drop the pages handed over (it did when the listing's placeholder had
/// another mtime than the file's).
#[test]
fn a_samples_other_files_stay_in_the_page_cache_when_a_cold_listing_had_no_sizes() {
    others_are_handed_over(false);
}

fn others_are_handed_over(stat_first: bool) {
    let dir = fixtures().join("mds/basic");
    let exp = Expected::load(&dir);
    let m = sibling_push_alone(&dir);
    let epoch = m.mnt.join("rank-0/epoch-0");
    let samples = files_by_sample(&m, &epoch, stat_first);
    let columns = samples[0].len() as u64;
    assert!(columns > 1);
    let read_and_check = |g: usize, f: &str| {
        let got = std::fs::read(epoch.join(f)).unwrap();
        assert_eq!(got, expected(&exp, g as u64, f), "{f}");
    };
    // The learning pause: every file is read through the daemon (empty files need no read),
    // nothing is handed over.
    let mut next = 0;
    while reads(&m) + columns <= LEARN {
        for f in &samples[next] {
            read_and_check(next, f);
        }
        next += 1;
    }
    assert_eq!(pushed(&m), 0, "handed over while learning");
    // The sample during which the pause ends, then until what it handed over has landed.
    for f in &samples[next] {
        read_and_check(next, f);
    }
    next += 1;
    let mut settled = pushed(&m);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = pushed(&m);
        if now == settled {
            break;
        }
        settled = now;
    }
    // From here, the first file's read hands the others over.
    let mut checked = 0;
    for (g, files) in samples.iter().enumerate().skip(next).take(100) {
        let others = files[1..]
            .iter()
            .filter(|f| !expected(&exp, g as u64, f).is_empty())
            .count() as u64;
        if expected(&exp, g as u64, &files[0]).is_empty() {
            // Nothing to read, so nothing is handed over: read the rest as usual.
            for f in files {
                read_and_check(g, f);
            }
            continue;
        }
        let before = pushed(&m);
        read_and_check(g, &files[0]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while pushed(&m) < before + others {
            assert!(
                Instant::now() < deadline,
                "sample {g}: its files were not handed over"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let through_fuse = reads(&m);
        for f in &files[1..] {
            read_and_check(g, f);
        }
        assert_eq!(
            reads(&m),
            through_fuse,
            "sample {g}: a handed-over file was read through FUSE"
        );
        checked += 1;
    }
    assert!(checked > 80, "only {checked} samples had a first file");
    let s = m.status();
    assert_eq!(s["page_cache_pushes"]["dropped"], 0);
    assert_eq!(s["page_cache_pushes"]["refused"], 0);
    assert_eq!(s["errors"]["count"], 0);
}

#[test]
fn columns_nobody_reads_are_not_handed_over() {
    let dir = fixtures().join("mds/basic");
    let exp = Expected::load(&dir);
    let m = sibling_push_alone(&dir);
    let epoch = m.mnt.join("rank-0/epoch-0");
    let samples = files_by_sample(&m, &epoch, true);
    // Only each sample's first file is read, well past the learning pause.
    for (g, files) in samples.iter().enumerate().take(3 * LEARN as usize) {
        let got = std::fs::read(epoch.join(&files[0])).unwrap();
        assert_eq!(got, expected(&exp, g as u64, &files[0]));
    }
    assert!(reads(&m) > 2 * LEARN);
    assert_eq!(pushed(&m), 0);
}
