//! `ResilientStore`: timeouts, bounded concurrency and retries around any [`Store`].
//!
//! Backoff is "full jitter" from the AWS Architecture Blog post *Exponential Backoff And
//! Jitter* (Marc Brooker, 2015): before retry `n` sleep a uniform random time in
//! `[0, min(max_backoff, initial_backoff * 2^n)]`. It spreads retries of many clients that
//! failed together (a throttled prefix) instead of having them return in lock step.
//!
//! Each attempt holds one semaphore permit for its whole duration, body included, so
//! `max_concurrency` bounds the connections one mount opens; the per-request timeout covers
//! the body too, so a stalled transfer is abandoned and retried rather than hanging a reader.
//! A request a reader waits for (see [`super::demand_scope`]) that finds every permit taken
//! may use an express permit instead: up to half as many connections again, for reads only,
//! so a read never queues behind the readahead's requests for shards needed later.

use super::{
    Fetched, GetOptions, ObjectInfo, ObjectKey, Store, StoreChecksums, StoreError, StoreOptions,
    TransientKind,
};
use rand::Rng;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The express permits of a store with `max_concurrency` regular ones: half as many again.
fn express_permits(max_concurrency: usize) -> usize {
    (max_concurrency / 2).max(1)
}

/// Adds per-request timeouts, a concurrency bound and retries to an inner store.
#[derive(Debug)]
pub struct ResilientStore {
    inner: Arc<dyn Store>,
    permits: Arc<Semaphore>,
    /// Extra permits for requests a reader waits for, when `permits` are all taken.
    express: Arc<Semaphore>,
    timeout: Duration,
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl ResilientStore {
    /// Wraps `inner` with the timeout, retry and concurrency settings of `opts`.
    pub fn new(inner: Arc<dyn Store>, opts: &StoreOptions) -> Self {
        ResilientStore {
            inner,
            permits: Arc::new(Semaphore::new(opts.max_concurrency.max(1))),
            express: Arc::new(Semaphore::new(express_permits(opts.max_concurrency))),
            timeout: opts.request_timeout,
            max_retries: opts.max_retries,
            initial_backoff: opts.initial_backoff,
            max_backoff: opts.max_backoff,
        }
    }

    /// Connections in use now (regular and express permits taken).
    #[cfg(test)]
    fn in_use(&self, max_concurrency: usize) -> usize {
        max_concurrency.max(1) - self.permits.available_permits() + express_permits(max_concurrency)
            - self.express.available_permits()
    }

    fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1u32.checked_shl(retry.min(30)).unwrap_or(u32::MAX));
        let cap = exp.min(self.max_backoff);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::rng().random_range(0..=nanos))
    }

    /// Runs `op` until it succeeds, a non-retryable error, or the retry budget is spent.
    async fn run<'a, T, F, Fut>(&'a self, key: &'a ObjectKey, op: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + 'a,
    {
        let start = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            match self.attempt(key, op()).await {
                Ok(v) => return Ok(self.succeeded(key, attempt, v)),
                Err(e) => tokio::time::sleep(self.after_failure(e, attempt, start)?).await,
            }
        }
    }

    /// One attempt: a concurrency permit held for all of it, and the request timeout.
    async fn attempt<T>(
        &self,
        key: &ObjectKey,
        request: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let permit = if super::urgency::is_demand() {
            // Whichever frees first; a regular permit when both are free.
            tokio::select! {
                biased;
                p = self.permits.acquire() => p,
                p = self.express.acquire() => p,
            }
        } else {
            self.permits.acquire().await
        };
        let _permit = permit.map_err(|_| StoreError::Other {
            url: self.inner.url_of(key),
            detail: "store is shutting down".into(),
        })?;
        match tokio::time::timeout(self.timeout, request).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Transient {
                url: self.inner.url_of(key),
                kind: TransientKind::Timeout,
                detail: format!("no complete response within {:?}", self.timeout),
            }),
        }
    }

    /// One GET of the inner store whose returned body has the length asked for: decorators
    /// and odd servers can return fewer bytes without an error, which is worth a retry.
    async fn checked_get(
        &self,
        key: &ObjectKey,
        opts: GetOptions<'_>,
    ) -> Result<Fetched, StoreError> {
        let want = opts.range.as_ref().map(|r| r.end.saturating_sub(r.start));
        let returned = opts.into.is_none();
        let fetched = self.inner.get_opts(key, opts).await?;
        match want {
            Some(want) if returned && fetched.bytes.len() as u64 != want => {
                Err(StoreError::ShortBody {
                    url: self.inner.url_of(key),
                    expected: want,
                    got: fetched.bytes.len() as u64,
                })
            }
            _ => Ok(fetched),
        }
    }

    fn succeeded<T>(&self, key: &ObjectKey, attempt: u32, v: T) -> T {
        if attempt > 1 {
            tracing::debug!(url = %self.inner.url_of(key), attempt, "request succeeded after retries");
        }
        v
    }

    /// After attempt number `attempt` failed with `e`: how long to wait before the next one,
    /// or the error to return (not retryable, or the retry budget is spent).
    fn after_failure(
        &self,
        e: StoreError,
        attempt: u32,
        start: Instant,
    ) -> Result<Duration, StoreError> {
        if !e.is_retryable() {
            return Err(e);
        }
        if attempt > self.max_retries {
            return Err(StoreError::RetriesExhausted {
                attempts: attempt,
                elapsed: start.elapsed(),
                last: Box::new(e),
            });
        }
        let sleep = self.backoff(attempt - 1);
        tracing::info!(error = %e, attempt, backoff = ?sleep, "retrying request");
        Ok(sleep)
    }
}

#[async_trait::async_trait]
impl Store for ResilientStore {
    fn url_of(&self, key: &ObjectKey) -> String {
        self.inner.url_of(key)
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectInfo, StoreError> {
        self.run(key, move || self.inner.head(key)).await
    }

    async fn get_opts(
        &self,
        key: &ObjectKey,
        mut opts: GetOptions<'_>,
    ) -> Result<Fetched, StoreError> {
        // Every attempt fills the same bytes: a retry needs no buffer of its own. (Not
        // `run`: its `Fn` op cannot lend the buffer to one attempt after another, and an
        // `AsyncFnMut` op's future cannot be shown `Send` for every borrow.)
        let start = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let request = self.checked_get(key, opts.reborrow());
            match self.attempt(key, request).await {
                Ok(v) => return Ok(self.succeeded(key, attempt, v)),
                Err(e) => tokio::time::sleep(self.after_failure(e, attempt, start)?).await,
            }
        }
    }

    async fn checksums(&self, key: &ObjectKey) -> Result<StoreChecksums, StoreError> {
        self.run(key, move || self.inner.checksums(key)).await
    }

    async fn list(&self, prefix: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError> {
        // A listing has no single key; report errors against the prefix (or the root).
        {
            let start = Instant::now();
            let mut attempt = 0;
            loop {
                attempt += 1;
                let r = {
                    let _permit = self.permits.acquire().await.ok();
                    tokio::time::timeout(self.timeout, self.inner.list(prefix)).await
                };
                match r {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(e)) if e.is_retryable() && attempt <= self.max_retries => {
                        tokio::time::sleep(self.backoff(attempt - 1)).await;
                    }
                    Ok(Err(e)) if e.is_retryable() => {
                        return Err(StoreError::RetriesExhausted {
                            attempts: attempt,
                            elapsed: start.elapsed(),
                            last: Box::new(e),
                        })
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_) if attempt <= self.max_retries => {
                        tokio::time::sleep(self.backoff(attempt - 1)).await
                    }
                    Err(_) => {
                        return Err(StoreError::RetriesExhausted {
                            attempts: attempt,
                            elapsed: start.elapsed(),
                            last: Box::new(StoreError::Transient {
                                url: prefix
                                    .map(|p| self.inner.url_of(p))
                                    .unwrap_or_else(|| "listing".into()),
                                kind: TransientKind::Timeout,
                                detail: format!("no complete listing within {:?}", self.timeout),
                            }),
                        })
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{demand_scope, urgency, StoreExt};

    /// One-byte objects; a GET of `slow` takes a minute.
    #[derive(Debug)]
    struct SlowKey;

    #[async_trait::async_trait]
    impl Store for SlowKey {
        fn url_of(&self, key: &ObjectKey) -> String {
            format!("mem://{key}")
        }
        async fn head(&self, key: &ObjectKey) -> Result<ObjectInfo, StoreError> {
            Ok(ObjectInfo {
                key: key.clone(),
                size: 1,
                e_tag: None,
            })
        }
        async fn get_opts(
            &self,
            key: &ObjectKey,
            opts: GetOptions<'_>,
        ) -> Result<Fetched, StoreError> {
            if key.as_str() == "slow" {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            opts.answer(Fetched::plain(bytes::Bytes::from_static(b"x")), || {
                self.url_of(key)
            })
        }
        async fn list(&self, _p: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError> {
            async { Ok(Vec::new()) }.await
        }
    }

    #[tokio::test]
    async fn a_read_waiting_for_its_shard_does_not_queue_behind_busy_connections() {
        let opts = StoreOptions {
            max_concurrency: 2,
            ..StoreOptions::default()
        };
        let store = Arc::new(ResilientStore::new(Arc::new(SlowKey), &opts));
        let (slow, fast) = (
            ObjectKey::new("slow").expect("key"),
            ObjectKey::new("fast").expect("key"),
        );
        // The readahead's requests take both connections.
        let busy: Vec<_> = (0..2)
            .map(|_| {
                let (store, slow) = (store.clone(), slow.clone());
                tokio::spawn(async move { store.get(&slow).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(store.in_use(2), 2);
        let wait = Duration::from_millis(300);
        assert!(
            tokio::time::timeout(wait, store.get(&fast)).await.is_err(),
            "another prefetch waits for a connection"
        );
        let demand = {
            let _d = demand_scope(true);
            urgency::carry(store.get(&fast))
        };
        let got = tokio::time::timeout(wait, demand).await;
        assert!(
            matches!(got, Ok(Ok(ref b)) if b.as_ref() == b"x"),
            "a read's request takes an express connection: {got:?}"
        );
        // The express lane is bounded too: half as many again (one here).
        let held = {
            let _d = demand_scope(true);
            let (store, slow) = (store.clone(), slow.clone());
            tokio::spawn(urgency::carry(async move { store.get(&slow).await }))
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(store.in_use(2), 3);
        let another = {
            let _d = demand_scope(true);
            urgency::carry(store.get(&fast))
        };
        assert!(tokio::time::timeout(wait, another).await.is_err());
        held.abort();
        for b in busy {
            b.abort();
        }
    }
}
