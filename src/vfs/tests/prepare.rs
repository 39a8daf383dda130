//! Listing an epoch folder tells the source which sample its reader will read first
//! (`SampleSource::prepare_to_read`), so the first download's memory is ready before it.

use super::*;

#[test]
fn listing_an_epoch_folder_from_its_start_names_its_first_sample_once() {
    let src = memory(600, None);
    let v = vfs_over(src.clone(), vec![3, 5], 8);
    let rank = path(&v, "rank-5").unwrap();
    let rank_entries = list(&v, rank.ino, 100);
    assert!(
        src.prepared.lock().unwrap().is_empty(),
        "a rank folder names no sample"
    );
    let epoch1 = rank_entries
        .iter()
        .find(|e| e.name == "epoch-1")
        .expect("epoch-1 listed");
    // Paged: only the page from the folder's start names a sample.
    let files = list(&v, epoch1.ino, 7);
    assert!(files.len() > 14, "{} entries", files.len());
    let first = model_order(600, 8, 5, 1)[0];
    assert_eq!(*src.prepared.lock().unwrap(), vec![first]);
    // Listed again (as `ls` would): named again, cheaply (the source decides what to do).
    list(&v, epoch1.ino, 1000);
    assert_eq!(*src.prepared.lock().unwrap(), vec![first, first]);
    // The folder of every sample, in id order, is not one reader's order: nothing named.
    let samples = path(&v, "samples").unwrap();
    list(&v, samples.ino, 1000);
    assert_eq!(src.prepared.lock().unwrap().len(), 2);
}
