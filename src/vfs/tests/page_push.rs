//! A sample's other files handed to the page cache when its first file is read
//! (`Vfs::push_siblings`): what the tree records about them.

use super::*;

#[test]
fn a_file_handed_to_the_page_cache_has_its_size_known_for_its_look_up() {
    let v = vfs(600, vec![0], 1, None);
    let pushed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = pushed.clone();
    v.set_push_pages(Box::new(move |ino, bytes, _counters| {
        seen.lock().unwrap().push((ino, bytes.len() as u64));
        true
    }));
    // Samples with two or more columns (s % 3 != 0); the first `push::LEARN` reads at
    // offset 0 learn that column 1 is read too, then reading column 0 hands column 1 over.
    let two_columns = |s: u64| s % 3 != 0;
    let file = |s: u64, c: u32| Node::SampleFile(SampleId(s), ColumnNo(c)).ino().unwrap();
    let mut s = 0;
    let mut learnt = 0;
    while learnt < push::LEARN {
        if two_columns(s) {
            v.read(file(s, 0), 0, 4096).unwrap();
            v.read(file(s, 1), 0, 4096).unwrap();
            learnt += 2;
        }
        s += 1;
    }
    let sample = (s..).find(|&s| two_columns(s)).unwrap();
    assert!(
        v.attr_now(file(sample, 1)).is_none(),
        "nothing sized it yet"
    );
    v.read(file(sample, 0), 0, 4096).unwrap();
    let size = Memory::bytes(sample, 1).len() as u64;
    assert!(
        pushed.lock().unwrap().contains(&(file(sample, 1), size)),
        "column 1 of sample {sample} handed over: {:?}",
        pushed.lock().unwrap()
    );
    let attr = v
        .attr_now(file(sample, 1))
        .expect("size recorded when handed over");
    assert_eq!(attr.size, size);
}
