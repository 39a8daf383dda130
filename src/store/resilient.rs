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

use super::{ObjectInfo, ObjectKey, Store, StoreError, StoreFuture, StoreOptions, TransientKind};
use bytes::Bytes;
use rand::Rng;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Adds per-request timeouts, a concurrency bound and retries to an inner store.
#[derive(Debug)]
pub struct ResilientStore {
    inner: Arc<dyn Store>,
    permits: Arc<Semaphore>,
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
            timeout: opts.request_timeout,
            max_retries: opts.max_retries,
            initial_backoff: opts.initial_backoff,
            max_backoff: opts.max_backoff,
        }
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
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Other {
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

impl Store for ResilientStore {
    fn url_of(&self, key: &ObjectKey) -> String {
        self.inner.url_of(key)
    }

    fn head<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, ObjectInfo> {
        Box::pin(self.run(key, move || self.inner.head(key)))
    }

    fn get_range<'a>(&'a self, key: &'a ObjectKey, range: Range<u64>) -> StoreFuture<'a, Bytes> {
        Box::pin(self.run(key, move || {
            let range = range.clone();
            async move {
                let want = range.end.saturating_sub(range.start);
                let bytes = self.inner.get_range(key, range).await?;
                // Decorators and odd servers can return fewer bytes without an error.
                if bytes.len() as u64 != want {
                    return Err(StoreError::ShortBody {
                        url: self.inner.url_of(key),
                        expected: want,
                        got: bytes.len() as u64,
                    });
                }
                Ok(bytes)
            }
        }))
    }

    fn get<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, Bytes> {
        Box::pin(self.run(key, move || self.inner.get(key)))
    }

    fn get_fetched<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, super::Fetched> {
        Box::pin(self.run(key, move || self.inner.get_fetched(key)))
    }

    fn get_part_into<'a>(
        &'a self,
        key: &'a ObjectKey,
        range: Range<u64>,
        dest: &'a mut [u8],
    ) -> StoreFuture<'a, super::EtagMd5s> {
        Box::pin(async move {
            // Every attempt fills the same bytes: a retry needs no buffer of its own. (Not
            // `run`: its `Fn` op cannot lend `dest` to one attempt after another, and an
            // `AsyncFnMut` op's future cannot be shown `Send` for every borrow.)
            let start = Instant::now();
            let mut attempt: u32 = 0;
            loop {
                attempt += 1;
                let request = self.inner.get_part_into(key, range.clone(), &mut *dest);
                match self.attempt(key, request).await {
                    Ok(v) => return Ok(self.succeeded(key, attempt, v)),
                    Err(e) => tokio::time::sleep(self.after_failure(e, attempt, start)?).await,
                }
            }
        })
    }

    fn list<'a>(&'a self, prefix: Option<&'a ObjectKey>) -> StoreFuture<'a, Vec<ObjectInfo>> {
        // A listing has no single key; report errors against the prefix (or the root).
        Box::pin(async move {
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
        })
    }
}
