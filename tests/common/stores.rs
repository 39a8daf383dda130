//! Test doubles of [`Store`]: wrappers that change what another store answers, where the
//! fault injection of `store::FaultyStore` does not say it (an ETag of another kind, rewritten
//! bytes, damage that follows a pattern).

use std::ops::Range;
use std::sync::Arc;

use shardfs::store::{
    Fetched, GetOptions, ObjectInfo, ObjectKey, Store, StoreChecksums, StoreError,
};

/// How a [`Rewrite`] changes one GET's answer: the key, the range asked for (`None`: the
/// whole object) and the inner store's answer, whose bytes are always returned (not written
/// into a buffer) so that the rewrite sees them.
pub type RewriteFn = dyn Fn(&ObjectKey, Option<&Range<u64>>, Fetched) -> Fetched + Send + Sync;

/// A store over another whose GET answers pass through a function first; everything else is
/// the inner store's.
pub struct Rewrite {
    inner: Arc<dyn Store>,
    rewrite: Box<RewriteFn>,
}

impl Rewrite {
    /// Wraps `inner`, rewriting every GET answer with `rewrite`.
    pub fn new(
        inner: Arc<dyn Store>,
        rewrite: impl Fn(&ObjectKey, Option<&Range<u64>>, Fetched) -> Fetched + Send + Sync + 'static,
    ) -> Self {
        Rewrite {
            inner,
            rewrite: Box::new(rewrite),
        }
    }
}

impl std::fmt::Debug for Rewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rewrite({:?})", self.inner)
    }
}

#[async_trait::async_trait]
impl Store for Rewrite {
    fn url_of(&self, key: &ObjectKey) -> String {
        self.inner.url_of(key)
    }
    async fn head(&self, key: &ObjectKey) -> Result<ObjectInfo, StoreError> {
        self.inner.head(key).await
    }
    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions<'_>) -> Result<Fetched, StoreError> {
        let asked = GetOptions {
            range: opts.range.clone(),
            into: None,
        };
        let got = self.inner.get_opts(key, asked).await?;
        let got = (self.rewrite)(key, opts.range.as_ref(), got);
        opts.answer(got, || self.url_of(key))
    }
    async fn checksums(&self, key: &ObjectKey) -> Result<StoreChecksums, StoreError> {
        self.inner.checksums(key).await
    }
    async fn list(&self, prefix: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError> {
        self.inner.list(prefix).await
    }
}
