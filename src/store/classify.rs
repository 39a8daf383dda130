//! `classify`: an `object_store` error as the [`StoreError`] that says what to do about it.
//!
//! By type first, wherever the client lets it: `object_store::Error`'s own variants (missing
//! object, refused credentials), an `std::io::Error` in the source chain (local files: its
//! `ErrorKind`), the transport's [`HttpErrorKind`] (connect, timeout, reset). Only what the
//! client gives no type for is read from the message: the HTTP status of a refused request
//! (`object_store` keeps its request error type private), the S3 error code in an XML body,
//! and reqwest's words for a DNS failure, a refused certificate or a scheme not allowed.

use super::{StoreError, TransientKind};
use object_store::client::{HttpError, HttpErrorKind};

/// Cuts server bodies (XML error documents) to something that fits on one line.
fn short(s: &str) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 300 {
        let cut: String = one_line.chars().take(300).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}

/// The transport error inside an `object_store` error chain, if any.
fn http_error_kind(e: &(dyn std::error::Error + 'static)) -> Option<HttpErrorKind> {
    find_in_chain::<HttpError>(e).map(HttpError::kind)
}

/// The HTTP status in an `object_store` message ("... status code: 503 Service Unavailable ...").
/// `object_store` does not export its request error type, so the text is the only carrier.
fn http_status(message: &str) -> Option<u16> {
    let (_, after) = message.split_once("status code: ")?;
    after.get(..3)?.parse().ok()
}

/// `e` and each error of its source chain that adds words of its own, joined by ": ".
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// The first error of type `T` in the source chain of `e`, `e` included.
fn find_in_chain<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        cur = err.source();
    }
    None
}

/// A local file's error by its `io::ErrorKind`, when the kind says what to do.
fn io_error(kind: std::io::ErrorKind, url: String, message: &str) -> Option<StoreError> {
    use std::io::ErrorKind as K;
    let detail = short(message);
    Some(match kind {
        K::NotFound => StoreError::NotFound { url, detail },
        K::PermissionDenied => StoreError::AccessDenied { url, detail },
        K::TimedOut => StoreError::Transient {
            url,
            kind: TransientKind::Timeout,
            detail,
        },
        K::Interrupted | K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted => {
            StoreError::Transient {
                url,
                kind: TransientKind::Connection,
                detail,
            }
        }
        _ => return None,
    })
}

/// Maps an error from a request (not its body) to a [`StoreError`] about `url`.
pub(super) fn map_error(e: object_store::Error, url: &str) -> StoreError {
    let url = url.to_string();
    let message = error_chain(&e);
    match &e {
        object_store::Error::NotFound { .. } => {
            let detail = if message.contains("NoSuchBucket") {
                "bucket does not exist".to_string()
            } else {
                String::new()
            };
            return StoreError::NotFound { url, detail };
        }
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            return StoreError::AccessDenied {
                url,
                detail: short(&server_reason(&message)),
            };
        }
        _ => {}
    }
    // A local file's error (no transport under it: a socket's io errors are the transport's
    // to say, below).
    if let (None, Some(io)) = (http_error_kind(&e), find_in_chain::<std::io::Error>(&e)) {
        if let Some(mapped) = io_error(io.kind(), url.clone(), &message) {
            return mapped;
        }
    }
    if message.contains("Error performing token request") {
        return StoreError::AccessDenied {
            url,
            detail: "no credentials could be obtained (none configured, and the instance metadata service gave none)".into(),
        };
    }
    if let Some(status) = http_status(&message) {
        let detail = short(&message);
        return match status {
            429 => StoreError::Transient {
                url,
                kind: TransientKind::Throttled,
                detail,
            },
            503 if message.contains("SlowDown") => StoreError::Transient {
                url,
                kind: TransientKind::Throttled,
                detail,
            },
            408 => StoreError::Transient {
                url,
                kind: TransientKind::Timeout,
                detail,
            },
            // Not Implemented: the server has no such request (gcp-storage-emulator's XML
            // listing); asking again cannot help.
            501 => StoreError::Other {
                url,
                detail: format!("the store does not implement this request: {detail}"),
            },
            500..=599 => StoreError::Transient {
                url,
                kind: TransientKind::ServerError,
                detail,
            },
            400 if [
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "AuthorizationHeaderMalformed",
                "ExpiredToken",
            ]
            .iter()
            .any(|c| message.contains(c)) =>
            {
                StoreError::AccessDenied {
                    url,
                    detail: short(&server_reason(&message)),
                }
            }
            404 => StoreError::NotFound {
                url,
                detail: String::new(),
            },
            300..=399 => StoreError::Unreachable {
                url,
                detail: format!("redirected ({status}): wrong region or endpoint"),
            },
            _ => StoreError::Other { url, detail },
        };
    }
    if message.contains("URL scheme is not allowed") {
        return StoreError::Config {
            source_url: url.clone(),
            reason: format!(
                "plain http:// is not allowed for this endpoint; {}",
                super::error::endpoint_hint(&url)
            ),
        };
    }
    if message.contains("dns error") || message.contains("failed to lookup address") {
        return StoreError::UnknownHost {
            url,
            detail: short(&message),
        };
    }
    // rustls' words for a certificate it refuses (unknown issuer, expired, wrong name, ...).
    if message.contains("invalid peer certificate") {
        return StoreError::UntrustedCertificate {
            url,
            detail: short(&message),
        };
    }
    if message.contains("redirect without LOCATION") {
        return StoreError::Unreachable {
            url,
            detail: "redirected: wrong region or endpoint".into(),
        };
    }
    match http_error_kind(&e) {
        Some(HttpErrorKind::Connect) => StoreError::Unreachable {
            url,
            detail: short(&message),
        },
        Some(HttpErrorKind::Timeout) => StoreError::Transient {
            url,
            kind: TransientKind::Timeout,
            detail: short(&message),
        },
        Some(_) => StoreError::Transient {
            url,
            kind: TransientKind::Connection,
            detail: short(&message),
        },
        None => StoreError::Other {
            url,
            detail: short(&message),
        },
    }
}

/// Maps an error while streaming a body: whatever broke the stream is worth a retry,
/// except a local file that vanished.
pub(super) fn body_error(e: object_store::Error, url: &str) -> StoreError {
    match map_error(e, url) {
        StoreError::Other { url, detail } => StoreError::Transient {
            url,
            kind: TransientKind::Connection,
            detail,
        },
        other => other,
    }
}

/// The S3 error code and message out of an XML body, when there is one.
fn server_reason(message: &str) -> String {
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        let start = message.find(&open)? + open.len();
        let end = message[start..].find(&close)? + start;
        Some(message[start..end].to_string())
    };
    match (tag("Code"), tag("Message")) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(c), None) => c,
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_status_and_reason() {
        assert_eq!(
            http_status("Server returned non-2xx status code: 503 Service Unavailable: x"),
            Some(503)
        );
        assert_eq!(http_status("nothing"), None);
        assert_eq!(http_status("status code: 5"), None);
        let xml = "... <Error><Code>SignatureDoesNotMatch</Code><Message>bad sig</Message></Error>";
        assert_eq!(server_reason(xml), "SignatureDoesNotMatch: bad sig");
    }

    #[test]
    fn errors_are_sorted_by_type_into_kinds() {
        use crate::store::StoreErrorKind as K;
        let url = "file:///data/shard.00000.mds";
        let local = |kind: std::io::ErrorKind| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(std::io::Error::new(kind, "words that say nothing")),
        };
        for (e, want) in [
            (local(std::io::ErrorKind::PermissionDenied), K::AccessDenied),
            (local(std::io::ErrorKind::NotFound), K::NotFound),
            (local(std::io::ErrorKind::TimedOut), K::TimedOut),
            (local(std::io::ErrorKind::UnexpectedEof), K::Transient),
            (local(std::io::ErrorKind::InvalidData), K::Other),
            (
                object_store::Error::NotFound {
                    path: "x".into(),
                    source: "gone".into(),
                },
                K::NotFound,
            ),
            (
                object_store::Error::Unauthenticated {
                    path: "x".into(),
                    source: "no".into(),
                },
                K::AccessDenied,
            ),
        ] {
            let text = e.to_string();
            assert_eq!(map_error(e, url).kind(), want, "{text}");
        }
        // Retries that ran out keep the kind of the last attempt.
        let timed_out = StoreError::RetriesExhausted {
            attempts: 3,
            elapsed: std::time::Duration::from_secs(1),
            last: Box::new(StoreError::Transient {
                url: url.into(),
                kind: TransientKind::Timeout,
                detail: String::new(),
            }),
        };
        assert_eq!(timed_out.kind(), K::TimedOut);
    }
}
