//! `StoreOptions`: everything the CLI can say about how to reach a store.

use std::time::Duration;

/// How to reach and talk to an object store. The CLI fills this from flags and environment;
/// `Default` gives production settings.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// S3-compatible endpoint, e.g. `http://127.0.0.1:9000`. When `None`, `AWS_ENDPOINT_URL`
    /// and then `S3_ENDPOINT_URL` are consulted, else AWS itself.
    pub endpoint_url: Option<String>,
    /// S3 region; when `None`, `AWS_REGION`/`AWS_DEFAULT_REGION`/the profile, else `us-east-1`.
    pub region: Option<String>,
    /// Send unsigned requests (public buckets); no credentials are looked up.
    pub no_sign_request: bool,
    /// Explicit S3 credentials (e.g. from a Kubernetes secret); when `None`, the standard
    /// chain (environment, profile files, web identity, instance metadata) is used.
    pub credentials: Option<StaticCredentials>,
    /// Time allowed for one request including its whole body.
    pub request_timeout: Duration,
    /// Time allowed to establish a connection.
    pub connect_timeout: Duration,
    /// Longest silence of a connection (no response headers, no body bytes) before the attempt
    /// is abandoned as stalled and retried; shorter than `request_timeout`, so one stuck
    /// connection costs seconds, not minutes.
    pub stall_timeout: Duration,
    /// Retries after the first attempt for retryable failures.
    pub max_retries: u32,
    /// First backoff; doubled each retry, with full jitter.
    pub initial_backoff: Duration,
    /// Largest backoff between two attempts.
    pub max_backoff: Duration,
    /// Most requests in flight at once (across all callers of one store).
    pub max_concurrency: usize,
    /// Whole objects larger than this are fetched as parallel ranged GETs of this size
    /// ([`super::get_in_parts`]) where their check allows it; 0 = one GET per object.
    pub part_size: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            endpoint_url: None,
            region: None,
            no_sign_request: false,
            credentials: None,
            request_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(10),
            max_retries: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            max_concurrency: 64,
            part_size: 8 << 20,
        }
    }
}

/// An access key pair (and optional session token). `Debug` never prints the secrets.
#[derive(Clone)]
pub struct StaticCredentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}
