//! A listing of a rank folder gives the files it can size from their shards' headers their
//! sizes (`Vfs::readdir_plus` has the source make those headers ready first), so the kernel
//! opens them without a lookup each; the others go out without a size, as before.

use super::*;

/// Lists `dir` with READDIRPLUS in pages of 7 entries (the kernel's buffer holds a few at a
/// time, and the entry that did not fit comes again at the start of the next page).
fn list_plus_paged(v: &Vfs, dir: Ino) -> Vec<(String, Ino, Option<Attr>)> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let mut taken = 0;
        let mut last = None;
        v.readdir_plus(dir, offset, |e, attr| {
            if taken == 7 {
                return true;
            }
            taken += 1;
            last = Some(e.next_offset);
            out.push((e.name, e.ino, attr));
            false
        })
        .unwrap();
        match last {
            Some(o) => offset = o,
            None => return out,
        }
    }
}

fn sample_of(ino: Ino) -> Option<(u64, u32)> {
    match Node::from_ino(ino)? {
        Node::SampleFile(s, c) => Some((s.0, c.0)),
        _ => None,
    }
}

#[test]
fn a_rank_folder_s_listing_sizes_the_files_its_shard_headers_size() {
    // 600 samples, 10 per shard, one rank: position p is sample 599 - p.
    let src = memory(600, None);
    src.sized_by_headers.store(true, Relaxed);
    src.cold.store(true, Relaxed);
    let v = vfs_over(src.clone(), vec![0], 1);
    let epoch = path(&v, "rank-0/epoch-0").unwrap().ino;
    let entries = list_plus_paged(&v, epoch);

    // One call, from the listing's first page: the shards in the order their samples come.
    let readied = src.readied.lock().unwrap().clone();
    let expected: Vec<usize> = (0..60).rev().collect();
    assert_eq!(readied, vec![expected]);

    let (mut sized, mut unsized_) = (0, 0);
    for (name, ino, attr) in &entries {
        let Some((sample, column)) = sample_of(*ino) else {
            continue;
        };
        if column == 0 {
            let a = attr.unwrap_or_else(|| panic!("{name} listed without its size"));
            assert_eq!(a.size, Memory::bytes(sample, 0).len() as u64, "{name}");
            sized += 1;
        } else {
            assert!(attr.is_none(), "{name} listed with a size no header gives");
            unsized_ += 1;
        }
    }
    // Every sample has column 0; samples s have s % 3 more.
    assert_eq!((sized, unsized_), (600, 600));
    // Counted once each, though an entry that did not fit a page was offered again.
    let listed = status_file(&v).listed_files;
    assert_eq!((listed.with_size, listed.without_size), (600, 600));

    // The sizes are kept: attributes and a second listing need no header again.
    let a = path(&v, "rank-0/epoch-0/00000000.a.bin").unwrap();
    assert_eq!(a.size, 3);
    src.headers.lock().unwrap().clear();
    let again = list_plus_paged(&v, epoch);
    let sized_again = again
        .iter()
        .filter(|(_, i, a)| a.is_some() && sample_of(*i).is_some())
        .count();
    assert_eq!(sized_again, 600);
    // Only listings from the start ask for headers, and only of rank folders.
    assert_eq!(src.readied.lock().unwrap().len(), 2);
    let samples = path(&v, "samples").unwrap().ino;
    list_plus_paged(&v, samples);
    assert_eq!(src.readied.lock().unwrap().len(), 2);
}

#[test]
fn a_listed_size_from_an_unverified_header_is_checked_by_the_first_read() {
    let src = memory(40, None);
    src.sized_by_headers.store(true, Relaxed);
    src.size_lie.store(12, Relaxed);
    let v = vfs_over(src.clone(), vec![0], 1);
    let forgotten: Arc<std::sync::Mutex<Vec<Ino>>> = Arc::default();
    let f = forgotten.clone();
    v.set_forget_size(Box::new(move |ino, done| {
        f.lock().unwrap().push(ino);
        done();
    }));
    let epoch = path(&v, "rank-0/epoch-0").unwrap().ino;
    let entries = list_plus_paged(&v, epoch);
    let ino = Node::SampleFile(SampleId(12), ColumnNo(0)).ino().unwrap();
    let (_, _, attr) = entries.iter().find(|(_, i, _)| *i == ino).unwrap();
    // The header said 3 bytes more than the sample's verified bytes hold ("12").
    assert_eq!(attr.unwrap().size, 5);
    let e = v.read(ino, 0, 100).unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    assert!(e.to_string().contains("size 5 given"), "{e}");
    assert_eq!(*forgotten.lock().unwrap(), vec![ino]);
    // Once the kernel has forgotten it, the verified size and bytes.
    assert_eq!(v.getattr(ino).unwrap().size, 2);
    assert_eq!(&v.read(ino, 0, 100).unwrap()[..], b"12");
    // A right one is checked silently.
    let ok = Node::SampleFile(SampleId(13), ColumnNo(0)).ino().unwrap();
    assert_eq!(&v.read(ok, 0, 100).unwrap()[..], b"13");
    assert_eq!(forgotten.lock().unwrap().len(), 1);
}
