//! `StoreError`: what went wrong with which object, in words a user can act on.

use std::time::Duration;

/// Why a transient failure happened; all of these are retried by [`super::ResilientStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransientKind {
    /// The server answered 5xx (other than throttling).
    ServerError,
    /// The server asked us to slow down (503 SlowDown, 429, 503 with a throttling body).
    Throttled,
    /// The request or its body did not complete within the per-request timeout.
    Timeout,
    /// The connection was reset or closed mid-request, or the body could not be read.
    Connection,
}

impl std::fmt::Display for TransientKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransientKind::ServerError => "server error",
            TransientKind::Throttled => "throttled",
            TransientKind::Timeout => "timed out",
            TransientKind::Connection => "connection failed",
        })
    }
}

/// What kind of failure a [`StoreError`] is, for callers that choose their answer by kind
/// (the vfs maps each to an errno; the CLI to a message): the same kind whatever the backend
/// and whatever the words of its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The object, or its bucket or folder, does not exist.
    NotFound,
    /// The credentials were refused or could not be had.
    AccessDenied,
    /// No complete answer in time (the request, its body, or the connection).
    TimedOut,
    /// A failure another attempt may get past: a 5xx, throttling, a reset, an endpoint that
    /// does not answer now, an object rewritten during the download.
    Transient,
    /// The answer was not the bytes asked for (a body cut short, or longer than announced).
    Damaged,
    /// The store is set up wrong: a bad source, key or option, an unknown host, an untrusted
    /// certificate. Retrying does not help; the configuration must change.
    Misconfigured,
    /// Anything else.
    Other,
}

/// An error from the `store` module. Every variant names the object (as a URL) it is about.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The SOURCE string is not a URL or path we can serve from.
    #[error("invalid source {source_url:?}: {reason}")]
    InvalidSource {
        /// The source as given.
        source_url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A key is not a plain relative path inside the dataset root.
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The object (or its bucket) does not exist.
    #[error("{url}: not found{}", detail_suffix(.detail))]
    NotFound {
        /// The object's URL.
        url: String,
        /// Extra words from the server, e.g. "bucket does not exist".
        detail: String,
    },
    /// The credentials were refused or are missing.
    #[error("{url}: access denied ({detail}); {}", credentials_hint(.url))]
    AccessDenied {
        /// The object's URL.
        url: String,
        /// The server's reason.
        detail: String,
    },
    /// The endpoint could not be reached, or redirected us elsewhere (wrong region/endpoint).
    #[error("{url}: endpoint unreachable or wrong ({detail}); {}", endpoint_hint(.url))]
    Unreachable {
        /// The object's URL.
        url: String,
        /// The transport's reason.
        detail: String,
    },
    /// The endpoint's host name does not resolve (not retried: a typo stays a typo).
    #[error("{url}: unknown host ({detail}); {}", endpoint_hint(.url))]
    UnknownHost {
        /// The object's URL.
        url: String,
        /// The resolver's reason.
        detail: String,
    },
    /// The endpoint's TLS certificate was refused (not retried: it will not change by itself).
    #[error("{url}: the server's TLS certificate is not trusted ({detail}); {}", tls_hint(.url))]
    UntrustedCertificate {
        /// The object's URL.
        url: String,
        /// The verifier's reason.
        detail: String,
    },
    /// The body ended before the bytes the request asked for.
    #[error("{url}: short body: expected {expected} bytes, got {got}")]
    ShortBody {
        /// The object's URL.
        url: String,
        /// Bytes asked for.
        expected: u64,
        /// Bytes received.
        got: u64,
    },
    /// A failure worth retrying (5xx, throttling, timeout, reset).
    #[error("{url}: {kind}: {detail}")]
    Transient {
        /// The object's URL.
        url: String,
        /// The class of failure.
        kind: TransientKind,
        /// The transport's or server's words.
        detail: String,
    },
    /// Every retry failed; `last` is the final attempt's error.
    #[error("gave up after {attempts} attempts in {elapsed:?}: {last}")]
    RetriesExhausted {
        /// How many attempts were made.
        attempts: u32,
        /// Time spent on all attempts.
        elapsed: Duration,
        /// The last attempt's error.
        last: Box<StoreError>,
    },
    /// The store could not be configured (bad option, unreadable credential file, ...).
    #[error("store configuration for {source_url}: {reason}")]
    Config {
        /// The source being configured.
        source_url: String,
        /// What went wrong.
        reason: String,
    },
    /// The parts of one object came from different versions of it (their ETags differ):
    /// it was rewritten during the download. The whole download is worth another try.
    #[error("{url}: the object changed during the download ({detail})")]
    Changed {
        /// The object's URL.
        url: String,
        /// The ETags seen.
        detail: String,
    },
    /// Any other failure, permanent.
    #[error("{url}: {detail}")]
    Other {
        /// The object's URL.
        url: String,
        /// What went wrong.
        detail: String,
    },
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    }
}

/// What to check for the store that `url` is on (by its scheme): the settings that choose
/// its endpoint, and those that provide its credentials.
fn hints(url: &str) -> (&'static str, &'static str) {
    match url.split_once("://").map(|(s, _)| s) {
        Some("gs") => (
            "check --endpoint-url / STORAGE_EMULATOR_HOST / GOOGLE_BASE_URL",
            "check the credentials (GOOGLE_APPLICATION_CREDENTIALS / GOOGLE_SERVICE_ACCOUNT), or --no-sign-request for public data",
        ),
        Some("az") | Some("azure") | Some("abfs") | Some("abfss") => (
            "check --endpoint-url / AZURE_STORAGE_ACCOUNT_NAME, or AZURE_STORAGE_USE_EMULATOR / AZURITE_BLOB_STORAGE_URL for Azurite",
            "check the credentials (AZURE_STORAGE_ACCOUNT_KEY / AZURE_STORAGE_SAS_KEY / AZURE_STORAGE_ACCOUNT_NAME), or --no-sign-request for public data",
        ),
        Some("http") | Some("https") => (
            "check the URL",
            "check that the server allows reading this URL",
        ),
        _ => (
            "check --endpoint-url / AWS_ENDPOINT_URL and --region",
            "check the credentials (AWS_ACCESS_KEY_ID/AWS_PROFILE/...), --region, or --no-sign-request for public data",
        ),
    }
}

/// Which settings choose the endpoint of the store that `url` is on.
pub fn endpoint_hint(url: &str) -> &'static str {
    hints(url).0
}

/// What to check when the TLS certificate of the endpoint of `url` is refused.
pub fn tls_hint(url: &str) -> String {
    format!(
        "{}; a private CA must be in the system's trust store, or in SSL_CERT_FILE / SSL_CERT_DIR",
        endpoint_hint(url)
    )
}

/// Which settings provide the credentials of the store that `url` is on.
pub fn credentials_hint(url: &str) -> &'static str {
    hints(url).1
}

impl StoreError {
    /// True when another attempt might succeed: transient failures, short bodies and
    /// connection failures (a server restarting looks like an unreachable endpoint).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Transient { .. }
                | StoreError::ShortBody { .. }
                | StoreError::Unreachable { .. }
        )
    }

    /// True when the object or bucket does not exist (after unwrapping exhausted retries).
    pub fn is_not_found(&self) -> bool {
        match self {
            StoreError::NotFound { .. } => true,
            StoreError::RetriesExhausted { last, .. } => last.is_not_found(),
            _ => false,
        }
    }

    /// What kind of failure this is (of the last attempt, when retries ran out).
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            StoreError::NotFound { .. } => StoreErrorKind::NotFound,
            StoreError::AccessDenied { .. } => StoreErrorKind::AccessDenied,
            StoreError::Transient {
                kind: TransientKind::Timeout,
                ..
            } => StoreErrorKind::TimedOut,
            StoreError::Transient { .. }
            | StoreError::Unreachable { .. }
            | StoreError::Changed { .. } => StoreErrorKind::Transient,
            StoreError::ShortBody { .. } => StoreErrorKind::Damaged,
            StoreError::InvalidSource { .. }
            | StoreError::InvalidKey { .. }
            | StoreError::Config { .. }
            | StoreError::UnknownHost { .. }
            | StoreError::UntrustedCertificate { .. } => StoreErrorKind::Misconfigured,
            StoreError::RetriesExhausted { last, .. } => last.kind(),
            StoreError::Other { .. } => StoreErrorKind::Other,
        }
    }

    /// The final cause, looking through [`StoreError::RetriesExhausted`].
    pub fn root_cause(&self) -> &StoreError {
        match self {
            StoreError::RetriesExhausted { last, .. } => last.root_cause(),
            other => other,
        }
    }
}
