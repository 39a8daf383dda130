//! Which requests a reader is waiting for, so the store lets them go first.
//!
//! A shard download a read blocks on (a *demand*) must not queue behind the readahead's
//! downloads of shards needed later. The cache marks the thread that runs such a download
//! with [`demand_scope`]; [`BlockingStore`](super::BlockingStore) carries the mark into the
//! async requests it starts, and [`ResilientStore`](super::ResilientStore) gives them an
//! express lane of extra connections when every regular one is taken.

use std::cell::Cell;
use std::future::Future;

thread_local! {
    static DEMAND_THREAD: Cell<bool> = const { Cell::new(false) };
}

tokio::task_local! {
    static DEMAND_TASK: bool;
}

/// Marks the calling thread's store requests as a demand until dropped (see
/// [`demand_scope`]).
#[derive(Debug)]
pub struct DemandScope {
    before: bool,
}

/// While the returned guard lives, store requests made from this thread through a
/// [`BlockingStore`](super::BlockingStore) count as a reader's demand when `demand` is true
/// (and as ordinary requests when false).
pub fn demand_scope(demand: bool) -> DemandScope {
    let before = DEMAND_THREAD.with(|d| d.replace(demand));
    DemandScope { before }
}

impl Drop for DemandScope {
    fn drop(&mut self) {
        DEMAND_THREAD.with(|d| d.set(self.before));
    }
}

/// `fut`, carrying the calling thread's demand mark (as it is now) into every poll.
pub(crate) fn carry<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let demand = DEMAND_THREAD.with(Cell::get);
    DEMAND_TASK.scope(demand, fut)
}

/// Whether the request being made is a reader's demand.
pub(crate) fn is_demand() -> bool {
    DEMAND_TASK.try_with(|d| *d).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_reaches_the_futures_of_its_thread_and_ends_with_its_scope() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert!(!rt.block_on(carry(async { is_demand() })));
        {
            let _d = demand_scope(true);
            // Futures polled inside it see it too.
            let inner = async { is_demand() };
            assert!(rt.block_on(carry(async move { inner.await && is_demand() })));
            {
                let _n = demand_scope(false);
                assert!(!rt.block_on(carry(async { is_demand() })));
            }
            assert!(rt.block_on(carry(async { is_demand() })));
        }
        assert!(!rt.block_on(carry(async { is_demand() })));
        // Outside any carried future there is no mark.
        assert!(!is_demand());
    }
}
