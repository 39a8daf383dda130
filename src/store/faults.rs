//! `FaultyStore`: injects the failures real object stores produce, for tests and benches.
//!
//! Rules are matched per request in insertion order; each has an optional key filter and an
//! optional number of times it fires. `Latency` rules delay the request and let it go on;
//! the first other matching rule decides the request's fate. Transient faults come back as
//! the same [`StoreError`] variants the real backend produces, and `Truncate`/`Corrupt`
//! return damaged bytes *without* an error, as a broken proxy or disk would: callers must
//! catch those by length and hash.

use super::{
    Fetched, GetOptions, ObjectInfo, ObjectKey, Store, StoreChecksums, StoreError, TransientKind,
};
use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One kind of injected failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 503 SlowDown (throttling).
    SlowDown,
    /// 500 InternalError.
    ServerError,
    /// The connection was reset mid-request.
    ConnectionReset,
    /// The body is cut to half its length, without an error.
    Truncate,
    /// One byte in the middle of the body is flipped, without an error.
    Corrupt,
    /// The request is delayed, then proceeds.
    Latency(Duration),
}

#[derive(Debug)]
struct Rule {
    fault: Fault,
    key: Option<String>,
    remaining: Option<u64>,
}

/// A store that forwards to `inner` but injects [`Fault`]s by rule.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    rules: Mutex<Vec<Rule>>,
    fired: AtomicU64,
}

enum Outcome {
    Fail(StoreError),
    Damage(Fault),
    Pass,
}

impl FaultyStore {
    /// Wraps `inner` with no rules.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        FaultyStore {
            inner,
            rules: Mutex::new(Vec::new()),
            fired: AtomicU64::new(0),
        }
    }

    /// Adds a rule: `fault` on requests for `key` (any key when `None`), `times` times
    /// (forever when `None`).
    pub fn inject(&self, fault: Fault, key: Option<&str>, times: Option<u64>) {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Rule {
                fault,
                key: key.map(str::to_string),
                remaining: times,
            });
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// How many faults (latency included) have fired so far.
    pub fn fired(&self) -> u64 {
        self.fired.load(Ordering::Relaxed)
    }

    /// Consumes the matching rules for one request: total latency and the outcome. Damage
    /// to a body (truncation, a flipped byte) applies to requests with a `body` only: a HEAD
    /// leaves such a rule for the GET it is meant for.
    fn decide(&self, key: &ObjectKey, body: bool) -> (Duration, Outcome) {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let mut delay = Duration::ZERO;
        let mut outcome = Outcome::Pass;
        for rule in rules.iter_mut() {
            if rule.remaining == Some(0) || rule.key.as_deref().is_some_and(|k| k != key.as_str()) {
                continue;
            }
            let is_latency = matches!(rule.fault, Fault::Latency(_));
            if !is_latency && !matches!(outcome, Outcome::Pass) {
                continue;
            }
            if !body && matches!(rule.fault, Fault::Truncate | Fault::Corrupt) {
                continue;
            }
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            self.fired.fetch_add(1, Ordering::Relaxed);
            let url = self.inner.url_of(key);
            outcome = match &rule.fault {
                Fault::Latency(d) => {
                    delay += *d;
                    outcome
                }
                Fault::SlowDown => Outcome::Fail(StoreError::Transient {
                    url,
                    kind: TransientKind::Throttled,
                    detail: "injected 503 SlowDown".into(),
                }),
                Fault::ServerError => Outcome::Fail(StoreError::Transient {
                    url,
                    kind: TransientKind::ServerError,
                    detail: "injected 500 InternalError".into(),
                }),
                Fault::ConnectionReset => Outcome::Fail(StoreError::Transient {
                    url,
                    kind: TransientKind::Connection,
                    detail: "injected connection reset by peer".into(),
                }),
                f @ (Fault::Truncate | Fault::Corrupt) => Outcome::Damage(f.clone()),
            };
        }
        (delay, outcome)
    }

    /// Decides the fault for one request to `key` and sleeps its added latency.
    async fn next_fault(&self, key: &ObjectKey, body: bool) -> Outcome {
        let (delay, outcome) = self.decide(key, body);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        outcome
    }
}

/// Flips one byte in the middle of `bytes` (none when empty).
fn flip_middle(bytes: &mut [u8]) {
    let mid = bytes.len() / 2;
    if let Some(byte) = bytes.get_mut(mid) {
        *byte ^= 0x5a;
    }
}

#[async_trait::async_trait]
impl Store for FaultyStore {
    fn url_of(&self, key: &ObjectKey) -> String {
        self.inner.url_of(key)
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectInfo, StoreError> {
        match self.next_fault(key, false).await {
            Outcome::Fail(e) => Err(e),
            _ => self.inner.head(key).await,
        }
    }

    async fn get_opts(
        &self,
        key: &ObjectKey,
        mut opts: GetOptions<'_>,
    ) -> Result<Fetched, StoreError> {
        let damage = match self.next_fault(key, true).await {
            Outcome::Fail(e) => return Err(e),
            Outcome::Pass => return self.inner.get_opts(key, opts).await,
            Outcome::Damage(f) => f,
        };
        // Damage applies to the body only: the store's checksums stay what it recorded.
        let mut fetched = self.inner.get_opts(key, opts.reborrow()).await?;
        match (damage, opts.into) {
            // A body written as it arrives stops half way: what a short read looks like
            // from a real server.
            (Fault::Truncate, Some(dest)) => Err(StoreError::ShortBody {
                url: self.inner.url_of(key),
                expected: dest.len() as u64,
                got: dest.len() as u64 / 2,
            }),
            (Fault::Truncate, None) => {
                fetched.bytes = fetched.bytes.slice(..fetched.bytes.len() / 2);
                Ok(fetched)
            }
            (_, Some(dest)) => {
                flip_middle(dest);
                Ok(fetched)
            }
            (_, None) => {
                let mut v = fetched.bytes.to_vec();
                flip_middle(&mut v);
                fetched.bytes = Bytes::from(v);
                Ok(fetched)
            }
        }
    }

    async fn checksums(&self, key: &ObjectKey) -> Result<StoreChecksums, StoreError> {
        match self.next_fault(key, false).await {
            Outcome::Fail(e) => Err(e),
            _ => self.inner.checksums(key).await,
        }
    }

    async fn list(&self, prefix: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError> {
        self.inner.list(prefix).await
    }
}
