//! How a PyTorch DataLoader delivers one rank's samples: each worker yields its ids in order
//! (upstream skips -1), cut into batches of `batch_size` (the last may be short), and the
//! DataLoader takes batch j of worker 0, 1, …, W−1, then batch j+1, skipping workers that have
//! run out.

/// The rank's read order, given each worker's ids (padding already removed).
pub fn dataloader_order(workers: &[Vec<u64>], batch_size: u64) -> Vec<u64> {
    let b = batch_size.max(1) as usize;
    let total: usize = workers.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut j = 0usize;
    while out.len() < total {
        for w in workers {
            let start = j * b;
            if start < w.len() {
                out.extend_from_slice(&w[start..(start + b).min(w.len())]);
            }
        }
        j += 1;
    }
    out
}
