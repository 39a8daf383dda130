//! A shard that lands from the store hands the files readers of listed folders are about to
//! read to the kernel's page cache (`Vfs::push_landed`): which files, with which bytes, and
//! what the tree records about them.

use super::*;
use crate::vfs::landed::{BEHIND, LEARN_READS, MARK_EVERY};

type Pushed = Arc<std::sync::Mutex<Vec<(Ino, Vec<u8>)>>>;

/// A vfs over 600 samples (one rank, world 1: position p is sample 599 - p, 10 per shard)
/// whose landed pushes are recorded.
fn recording() -> (Arc<Memory>, Arc<Vfs>, Pushed) {
    let src = memory(600, None);
    let v = Arc::new(vfs_over(src.clone(), vec![0], 1));
    let pushed: Pushed = Arc::default();
    let seen = pushed.clone();
    v.set_push_batches(
        Box::new(move |files, counters, _wait| {
            for (ino, bytes) in files {
                counters.stored(bytes.len());
                seen.lock().unwrap().push((ino, bytes.to_vec()));
            }
            true
        }),
        Box::new(|_| None),
    );
    (src, v, pushed)
}

/// Reads `ino` (a file opened through a rank folder) from its start until the columns read
/// are learnt.
fn learn(v: &Vfs, ino: Ino) {
    for _ in 0..LEARN_READS {
        v.read(ino, 0, 4096).unwrap();
    }
}

fn file(s: u64, c: u32) -> Ino {
    Node::SampleFile(SampleId(s), ColumnNo(c)).ino().unwrap()
}

/// Lists `rank-0/epoch-0` as the kernel does for a loader (READDIRPLUS, from the start).
fn list_plus(v: &Vfs) -> Ino {
    let epoch = path(v, "rank-0/epoch-0").unwrap().ino;
    let mut offset = 0;
    loop {
        let mut last = None;
        v.readdir_plus(epoch, offset, |e, _| {
            last = Some(e.next_offset);
            false
        })
        .unwrap();
        match last {
            Some(o) => offset = o,
            None => break,
        }
    }
    epoch
}

#[test]
fn a_landed_shard_hands_over_the_opened_columns_of_samples_ahead_of_the_reader() {
    let (src, v, pushed) = recording();
    let epoch = list_plus(&v);
    // The reader reads position 0 (sample 599, column 0) and position 1's column 1 (sample
    // 598 has two columns); `ls -l` opened the z files of positions 3 and 6 (samples 596
    // and 593 have three columns), which says nothing of what is read.
    v.lookup(epoch, "00000003.z.npy").unwrap();
    v.lookup(epoch, "00000006.z.npy").unwrap();
    let a = v.lookup(epoch, "00000000.a.bin").unwrap();
    let b = v.lookup(epoch, "00000001.b.c.txt").unwrap();
    v.read(b.ino, 0, 4096).unwrap();
    learn(&v, a.ino);
    assert!(pushed.lock().unwrap().is_empty(), "nothing landed yet");
    assert!(
        v.attr_now(file(597, 0)).is_none(),
        "position 2: no size yet"
    );

    // Shard 59 holds samples 590..=599, at positions 0..=9: every one but the mark at 0,
    // columns a and b.c (z was never read), each file with its bytes.
    src.land(59);
    let got = std::mem::take(&mut *pushed.lock().unwrap());
    let mut want = Vec::new();
    for p in 1..10u64 {
        let s = 599 - p;
        for c in 0..(1 + s % 3).min(2) as u32 {
            want.push((file(s, c), Memory::bytes(s, c)));
        }
    }
    assert_eq!(got, want);
    let first = got.len() as u64;
    // Their sizes are known now: the look-ups that come when they are opened ask nothing.
    // (Position 1's b.c was read, so its size was known before.)
    let b_ino = b.ino;
    for (ino, bytes) in got.iter().filter(|(i, _)| *i != b_ino) {
        assert_eq!(v.attr_now(*ino).unwrap().size, bytes.len() as u64);
    }

    // Shard 0 (positions 590..=599) is ahead too; position 592 is a mark, and 599 the
    // folder's last (read through us, so the epoch's end is seen).
    assert_eq!(592 % MARK_EVERY, 0);
    src.land(0);
    let got = std::mem::take(&mut *pushed.lock().unwrap());
    let samples: std::collections::BTreeSet<u64> = got
        .iter()
        .map(|(ino, _)| match Node::from_ino(*ino) {
            Some(Node::SampleFile(s, _)) => s.0,
            n => panic!("not a sample file: {n:?}"),
        })
        .collect();
    let want: std::collections::BTreeSet<u64> = (1..10).filter(|&s| s != 599 - 592).collect();
    assert_eq!(samples, want);
    let status = status_file(&v);
    assert_eq!(status.landed_pushes.files, first + got.len() as u64);
}

#[test]
fn nothing_is_handed_over_behind_the_reader_nor_for_folders_not_listed() {
    let (src, v, pushed) = recording();
    // Not listed: the kernel holds no inode for the names, so nothing can be handed over.
    let epoch = path(&v, "rank-0/epoch-0").unwrap().ino;
    let a = v.lookup(epoch, "00000000.a.bin").unwrap();
    learn(&v, a.ino);
    src.land(59);
    assert!(pushed.lock().unwrap().is_empty());

    // Listed, the reader far on (position 400: sample 199): shards behind it give nothing
    // but what lies within `BEHIND` positions of it.
    list_plus(&v);
    let far = v
        .lookup(epoch, &format!("{:08}.a.bin", 400))
        .expect("position 400");
    learn(&v, far.ino);
    src.land(59);
    assert!(
        pushed.lock().unwrap().is_empty(),
        "positions 0..=9 are behind"
    );
    // Shard 30 holds samples 300..=309: positions 290..=299, within BEHIND of 400.
    const { assert!(400 - 290 <= BEHIND) };
    src.land(30);
    assert_eq!(
        pushed.lock().unwrap().len(),
        10,
        "ten samples of the one column read"
    );
}

#[test]
fn a_read_whose_shard_cannot_be_read_now_is_answered_from_bytes_waiting_to_be_pushed() {
    let src = memory(600, None);
    let v = Arc::new(vfs_over(src.clone(), vec![0], 1));
    // Sample 598's column a waits in the pusher's queue (its bytes marked, to tell them apart).
    let waiting = file(598, 0);
    v.set_push_batches(
        Box::new(|_, _, _| true),
        Box::new(move |ino| (ino == waiting).then(|| bytes::Bytes::from_static(b"held 598"))),
    );
    let epoch = path(&v, "rank-0/epoch-0").unwrap().ino;
    let a = v.lookup(epoch, "00000001.a.bin").unwrap();
    assert_eq!(a.ino, waiting);
    // Its shard on hand: read as usual.
    assert_eq!(
        &v.read(waiting, 0, 4096).unwrap()[..],
        &Memory::bytes(598, 0)[..]
    );
    // Its shard gone (evicted, or never written): the waiting bytes, not a new download,
    // answered at once (not queued behind reads of its shard that wait for one).
    src.cold.store(true, Relaxed);
    assert_eq!(v.waits_for(waiting, true), None);
    let other_ino = file(597, 0);
    assert_eq!(v.waits_for(other_ino, true), Some(59));
    assert_eq!(&v.read(waiting, 0, 4096).unwrap()[..], b"held 598");
    assert_eq!(&v.read(waiting, 5, 2).unwrap()[..], b"59");
    // Another file of the same shard has no waiting bytes: read from the source.
    let other = v.lookup(epoch, "00000002.a.bin").unwrap();
    assert_eq!(
        &v.read(other.ino, 0, 4096).unwrap()[..],
        &Memory::bytes(597, 0)[..]
    );
}
