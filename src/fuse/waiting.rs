//! Threads for FUSE requests that must wait for the object store.
//!
//! The FUSE threads are few (one per core): a request that waits for a shard's download on
//! one of them holds up every other request the kernel has queued, including reads of shards
//! already on disk and `status.json`. Requests that may wait are handed to this pool instead,
//! and the FUSE threads go back to the kernel at once.
//!
//! Requests are grouped by the shard they wait for: one thread serves a shard's requests one
//! after the other (the first waits for the download, the rest then read from disk), so the
//! threads in use follow the shards being waited for, not the readers waiting (16 DataLoader
//! workers of a rank mostly wait for the same shard). When a shard's request fails, the
//! requests queued behind it run side by side, so that they share the next download attempt
//! instead of each making its own in turn.
//!
//! The pool starts a thread when every thread it has is busy (up to a cap), and a thread that
//! has had nothing to do for `IDLE_EXIT` ends, so an idle mount holds no waiting threads.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long a thread of the pool stays without work before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(30);

/// Work for a thread of the pool.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// One request waiting for a shard: replies to the kernel, and says whether it succeeded.
type Request = Box<dyn FnOnce() -> bool + Send + 'static>;

/// A pool of threads that run requests which may block for a long time.
#[derive(Clone)]
pub struct WaitingPool {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Requests queued per shard behind the one its thread is serving.
    by_shard: Mutex<HashMap<u32, VecDeque<Request>>>,
    work: Condvar,
    max_threads: usize,
    idle_exit: Duration,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Threads alive.
    threads: usize,
    /// Threads waiting for a job.
    idle: usize,
}

impl WaitingPool {
    /// A pool of at most `max_threads` threads (at least one); none is started yet.
    pub fn new(max_threads: usize) -> WaitingPool {
        Self::with_idle_exit(max_threads, IDLE_EXIT)
    }

    fn with_idle_exit(max_threads: usize, idle_exit: Duration) -> WaitingPool {
        WaitingPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                by_shard: Mutex::new(HashMap::new()),
                work: Condvar::new(),
                max_threads: max_threads.max(1),
                idle_exit,
            }),
        }
    }

    /// Serves `request`, which waits for `shard`, on a thread of the pool: after the requests
    /// for the same shard queued before it, on the thread serving them.
    pub fn run_for(&self, shard: u32, request: impl FnOnce() -> bool + Send + 'static) {
        {
            let mut by_shard = self.shared.by_shard();
            if let Some(queued) = by_shard.get_mut(&shard) {
                queued.push_back(Box::new(request));
                return;
            }
            by_shard.insert(shard, VecDeque::new());
        }
        let pool = self.clone();
        self.run(move || pool.serve_shard(shard, Box::new(request)));
    }

    /// Serves `first` and then the requests queued for `shard`, until none is left.
    fn serve_shard(&self, shard: u32, first: Request) {
        let mut ok = first();
        loop {
            let mut by_shard = self.shared.by_shard();
            let next = by_shard.get_mut(&shard).and_then(|q| q.pop_front());
            let Some(next) = next else {
                by_shard.remove(&shard);
                return;
            };
            if !ok {
                // Side by side: they wait for one new download rather than one each in turn.
                let rest = by_shard.remove(&shard).unwrap_or_default();
                drop(by_shard);
                for r in std::iter::once(next).chain(rest) {
                    self.run(move || {
                        r();
                    });
                }
                return;
            }
            drop(by_shard);
            ok = next();
        }
    }

    /// Runs `job` on a thread of the pool: an idle one, else a new one while under the cap,
    /// else the first that frees up. When no thread can be started at all, runs it here.
    fn run(&self, job: impl FnOnce() + Send + 'static) {
        let mut st = self.shared.lock();
        st.jobs.push_back(Box::new(job));
        if st.jobs.len() <= st.idle {
            drop(st);
            self.shared.work.notify_one();
            return;
        }
        if st.threads >= self.shared.max_threads {
            // Queued: the busy threads take it in turn.
            return;
        }
        st.threads += 1;
        drop(st);
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("fuse-wait".into())
            .spawn(move || shared.serve());
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a thread for a waiting FUSE request; running it on the FUSE thread");
            let mut st = self.shared.lock();
            st.threads -= 1;
            // Some thread of the pool takes the queue's jobs, else this one runs them.
            if st.threads == 0 {
                while let Some(job) = st.jobs.pop_front() {
                    drop(st);
                    job();
                    st = self.shared.lock();
                }
            }
        }
    }

    /// Threads alive and requests queued for them, for tests.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let st = self.shared.lock();
        (st.threads, st.jobs.len())
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn by_shard(&self) -> MutexGuard<'_, HashMap<u32, VecDeque<Request>>> {
        self.by_shard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A thread of the pool: runs queued jobs until it has waited `idle_exit` for one.
    fn serve(&self) {
        let mut st = self.lock();
        loop {
            if let Some(job) = st.jobs.pop_front() {
                drop(st);
                job();
                st = self.lock();
                continue;
            }
            st.idle += 1;
            let (next, timeout) = self
                .work
                .wait_timeout(st, self.idle_exit)
                .unwrap_or_else(|p| p.into_inner());
            st = next;
            st.idle -= 1;
            if timeout.timed_out() && st.jobs.is_empty() {
                st.threads -= 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    #[test]
    fn a_blocked_job_does_not_hold_up_the_next_one() {
        let pool = WaitingPool::new(4);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let d = done_tx.clone();
        pool.run(move || {
            let _ = release_rx.recv();
            let _ = d.send("blocked");
        });
        pool.run(move || {
            let _ = done_tx.send("quick");
        });
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            "quick"
        );
        release_tx.send(()).unwrap();
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            "blocked"
        );
    }

    #[test]
    fn past_the_cap_jobs_queue_and_all_run() {
        let pool = WaitingPool::new(2);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let (done_tx, done_rx) = mpsc::channel();
        for i in 0..6 {
            let rx = release_rx.clone();
            let tx = done_tx.clone();
            pool.run(move || {
                let _ = rx.lock().unwrap().recv();
                let _ = tx.send(i);
            });
        }
        let (threads, queued) = pool.counts();
        assert_eq!(threads, 2, "the pool grew past its cap");
        assert!(queued >= 4, "{queued} queued");
        for _ in 0..6 {
            release_tx.send(()).unwrap();
        }
        let mut got: Vec<i32> = (0..6)
            .map(|_| done_rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        got.sort();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn one_thread_serves_a_shard_s_requests_in_turn_without_holding_up_other_shards() {
        let pool = WaitingPool::new(8);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let mut release_rx = Some(release_rx);
        for i in 0..4 {
            let rx = if i == 0 { release_rx.take() } else { None };
            let tx = done_tx.clone();
            let threads = threads.clone();
            pool.run_for(7, move || {
                if let Some(rx) = rx {
                    let _ = rx.recv();
                }
                threads.lock().unwrap().insert(std::thread::current().id());
                let _ = tx.send(i);
                true
            });
        }
        // Shard 7's first request holds its thread: a request for shard 8 goes on at once.
        let tx = done_tx.clone();
        pool.run_for(8, move || {
            let _ = tx.send(100);
            true
        });
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)).unwrap(), 100);
        assert!(done_rx.recv_timeout(Duration::from_millis(200)).is_err());
        release_tx.send(()).unwrap();
        let got: Vec<i32> = (0..4)
            .map(|_| done_rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, vec![0, 1, 2, 3], "in the order they came");
        assert_eq!(threads.lock().unwrap().len(), 1, "one thread for the shard");
        // The shard's queue goes once its thread finds it empty (just after the last reply).
        let started = Instant::now();
        while !pool.shared.by_shard().is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the shard's queue was left behind"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn after_a_failed_request_the_ones_queued_behind_it_run_side_by_side() {
        let pool = WaitingPool::new(8);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        pool.run_for(3, move || {
            let _ = release_rx.recv();
            false
        });
        // Three more requests that each finish only once all three run at the same time.
        let barrier = Arc::new(std::sync::Barrier::new(3));
        let (done_tx, done_rx) = mpsc::channel();
        for _ in 0..3 {
            let (b, tx) = (barrier.clone(), done_tx.clone());
            pool.run_for(3, move || {
                b.wait();
                let _ = tx.send(());
                true
            });
        }
        release_tx.send(()).unwrap();
        for _ in 0..3 {
            done_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the requests behind a failed one ran one after the other");
        }
    }

    #[test]
    fn idle_threads_are_reused_and_then_end() {
        let pool = WaitingPool::with_idle_exit(8, Duration::from_millis(300));
        for _ in 0..3 {
            let (tx, rx) = mpsc::channel();
            pool.run(move || {
                let _ = tx.send(());
            });
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
            // The job is done: wait until its thread is idle again before the next one.
            let started = Instant::now();
            while pool.shared.lock().idle == 0 && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert_eq!(pool.counts().0, 1, "one job at a time needs one thread");
        let started = Instant::now();
        while pool.counts().0 > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "an idle thread did not end"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
