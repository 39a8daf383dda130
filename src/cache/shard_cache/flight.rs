//! `Flight`: one fill in progress, and the readers waiting for it (its result, or its
//! verified bytes before they are on disk).

use crate::cache::CacheError;
use bytes::Bytes;
use std::sync::{Condvar, Mutex, MutexGuard};

/// One fill in progress; waiters block on `cv` until `result` is set, or until the shard's
/// verified bytes are in (`verified`, for [`ShardCache::sample`]: served before they are on
/// disk).
#[derive(Debug, Default)]
pub(super) struct Flight {
    state: Mutex<FlightState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
pub(super) struct FlightState {
    /// The downloaded and verified shard, from the moment it is checked until the fill ends.
    verified: Option<Bytes>,
    result: Option<Result<(), CacheError>>,
}

impl Flight {
    pub(super) fn lock(&self) -> MutexGuard<'_, FlightState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shard's bytes passed every check: readers of single samples need not wait for
    /// the disk write.
    pub(super) fn publish(&self, raw: Bytes) {
        let mut st = self.lock();
        if st.result.is_none() {
            st.verified = Some(raw);
        }
        drop(st);
        self.cv.notify_all();
    }

    pub(super) fn finish(&self, r: Result<(), CacheError>) {
        let mut st = self.lock();
        st.result = Some(r);
        // The shard is on disk now (or the fill failed): let go of its bytes.
        st.verified = None;
        drop(st);
        self.cv.notify_all();
    }

    pub(super) fn wait(&self) -> Result<(), CacheError> {
        let mut st = self.lock();
        loop {
            if let Some(r) = st.result.as_ref() {
                return r.clone();
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The verified bytes as soon as they are in; `None` when the fill ended first (the
    /// shard is resident, or the fill failed: look at the slot again).
    pub(super) fn wait_verified(&self) -> Option<Bytes> {
        let mut st = self.lock();
        loop {
            if let Some(b) = st.verified.as_ref() {
                return Some(b.clone());
            }
            if st.result.is_some() {
                return None;
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    pub(super) fn a_fill_s_verified_bytes_reach_its_waiters_before_it_ends_and_are_let_go_after() {
        let flight = Arc::new(Flight::default());
        let waiter = {
            let f = flight.clone();
            std::thread::spawn(move || f.wait_verified())
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "nothing verified yet");
        let raw = Bytes::from(vec![7u8; 1 << 20]);
        flight.publish(raw.clone());
        let got = waiter.join().expect("waiter");
        assert_eq!(
            got.as_deref(),
            Some(&raw[..]),
            "served before the fill ends"
        );
        drop(got);
        flight.finish(Ok(()));
        assert!(
            flight.wait_verified().is_none(),
            "after the fill: read the disk"
        );
        assert!(flight.wait().is_ok());
        // The flight holds no reference to the shard's bytes once the fill ended.
        assert!(raw.try_into_mut().is_ok(), "the bytes are ours alone again");

        // A fill that fails before its bytes are verified wakes its waiters with nothing.
        let failed = Arc::new(Flight::default());
        let waiter = {
            let f = failed.clone();
            std::thread::spawn(move || f.wait_verified())
        };
        failed.finish(Err(CacheError::FillAborted { shard: 3 }));
        assert!(waiter.join().expect("waiter").is_none());
        // Bytes published after the end are not kept.
        failed.publish(Bytes::from_static(b"late"));
        assert!(failed.wait_verified().is_none());
    }
}
