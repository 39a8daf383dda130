//! The checksums a store keeps for a whole object, read from its response headers.
//!
//! `object_store` keeps the response headers to itself but passes the HTTP response's
//! extensions through to `GetResult::extensions`. [`ChecksumConnector`] wraps the HTTP client
//! of every backend: for a full-object response (200, not 206) it parses the checksum headers
//! and puts a [`StoreChecksums`] into the response's extensions, where
//! [`super::ObjectStoreBackend`] finds it.
//!
//! It also makes answers of stores that leave things out acceptable to `object_store`: a
//! successful GET/HEAD without `Last-Modified` or `ETag` gets the epoch and a marker that
//! [`etag`] reads as "no ETag", and a HEAD answered 501 Not Implemented is asked again as a
//! one-byte GET (gcp-storage-emulator does all three).
//!
//! Headers read (all base64 of big-endian bytes):
//! - `x-goog-hash: crc32c=…,md5=…` — Google Cloud Storage (XML API); composite objects have no
//!   MD5, every object has a CRC32C.
//!   <https://cloud.google.com/storage/docs/xml-api/reference-headers#xgooghash>
//! - `Content-MD5` — Azure Blob Storage returns the blob's stored MD5 on a whole-blob GET
//!   (set by the service for single-shot uploads, by the client for block-list uploads).
//!   <https://learn.microsoft.com/rest/api/storageservices/get-blob#response-headers>
//! - `x-amz-checksum-{crc64nvme,crc32c,crc32,sha1,sha256}` — S3's stored checksum of the
//!   object. AWS S3 sends it only to a request with `x-amz-checksum-mode: ENABLED` (a header
//!   the signature must cover: see `ObjectStoreBackend::checksums`); some S3-compatible stores
//!   send it unasked. Only a full-object checksum is used (`x-amz-checksum-type: FULL_OBJECT`;
//!   CRC64NVME is always one): a composite one (`…-N`) is a checksum of the parts' checksums,
//!   which needs the part boundaries. S3 has computed a CRC64NVME for every object uploaded
//!   without a checksum of its own since December 2024.
//!   <https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html>

use base64::Engine;
use object_store::client::{HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse};
use object_store::client::{HttpService, ReqwestConnector};
use object_store::ClientOptions;

/// Checksums of a whole object as its store recorded them (not as the transfer computed them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreChecksums {
    /// MD5 of the object.
    pub md5: Option<[u8; 16]>,
    /// CRC32C (Castagnoli) of the object.
    pub crc32c: Option<u32>,
    /// CRC64/NVME of the object (S3's default checksum).
    pub crc64nvme: Option<u64>,
    /// CRC32 (ISO-HDLC, the zlib one) of the object.
    pub crc32: Option<u32>,
    /// SHA-1 of the object.
    pub sha1: Option<[u8; 20]>,
    /// SHA-256 of the object.
    pub sha256: Option<[u8; 32]>,
}

/// Bytes whose checksum is not the one the store keeps for them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} {got} differs from the store's {want}")]
pub struct ChecksumMismatch {
    /// Which checksum (`CRC32C`, `MD5`, ...).
    pub name: &'static str,
    /// The bytes' checksum, in hex.
    pub got: String,
    /// The store's, in hex.
    pub want: String,
}

impl StoreChecksums {
    /// True when the store gave no checksum at all.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Reads the checksum headers of a full-object response. Malformed values are ignored
    /// (a store that sends garbage simply gives no checksum).
    pub fn from_headers(headers: &http::HeaderMap) -> Self {
        let mut out = Self::default();
        for v in headers.get_all("x-goog-hash") {
            let Ok(v) = v.to_str() else { continue };
            for item in v.split(',') {
                match item.trim().split_once('=') {
                    Some(("md5", b)) => out.md5 = out.md5.or_else(|| decode(b)),
                    Some(("crc32c", b)) => out.crc32c = out.crc32c.or_else(|| decode_u32(b)),
                    _ => {}
                }
            }
        }
        if out.md5.is_none() {
            out.md5 = header_str(headers, "content-md5").and_then(decode);
        }
        let kind = header_str(headers, "x-amz-checksum-type");
        let composite = kind.is_some_and(|t| t.eq_ignore_ascii_case("COMPOSITE"));
        let full_object = kind.is_some_and(|t| t.eq_ignore_ascii_case("FULL_OBJECT"));
        if !composite {
            out.crc64nvme = header_str(headers, "x-amz-checksum-crc64nvme")
                .and_then(decode)
                .map(u64::from_be_bytes);
        }
        if full_object {
            let amz = |name: &str| header_str(headers, name);
            if out.crc32c.is_none() {
                out.crc32c = amz("x-amz-checksum-crc32c").and_then(decode_u32);
            }
            out.crc32 = amz("x-amz-checksum-crc32").and_then(decode_u32);
            out.sha1 = amz("x-amz-checksum-sha1").and_then(decode);
            out.sha256 = amz("x-amz-checksum-sha256").and_then(decode);
        }
        out
    }

    /// Checks `bytes` against every checksum present; the error names the one that differs.
    pub fn check(&self, bytes: &[u8]) -> Result<(), ChecksumMismatch> {
        fn differs(
            name: &'static str,
            got: impl AsRef<[u8]>,
            want: impl AsRef<[u8]>,
        ) -> ChecksumMismatch {
            ChecksumMismatch {
                name,
                got: hex::encode(got),
                want: hex::encode(want),
            }
        }
        if let Some(want) = self.crc64nvme {
            let got = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, bytes);
            if got != want {
                return Err(differs("CRC64NVME", got.to_be_bytes(), want.to_be_bytes()));
            }
        }
        if let Some(want) = self.crc32c {
            let got = crc32c::crc32c(bytes);
            if got != want {
                return Err(differs("CRC32C", got.to_be_bytes(), want.to_be_bytes()));
            }
        }
        if let Some(want) = self.crc32 {
            let got = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32IsoHdlc, bytes) as u32;
            if got != want {
                return Err(differs("CRC32", got.to_be_bytes(), want.to_be_bytes()));
            }
        }
        if let Some(want) = self.md5 {
            use md5::Digest;
            let got: [u8; 16] = md5::Md5::digest(bytes).into();
            if got != want {
                return Err(differs("MD5", got, want));
            }
        }
        if let Some(want) = self.sha1 {
            use sha1::Digest;
            let got: [u8; 20] = sha1::Sha1::digest(bytes).into();
            if got != want {
                return Err(differs("SHA-1", got, want));
            }
        }
        if let Some(want) = self.sha256 {
            use sha2::Digest;
            let got: [u8; 32] = sha2::Sha256::digest(bytes).into();
            if got != want {
                return Err(differs("SHA-256", got, want));
            }
        }
        Ok(())
    }
}

fn header_str<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A base64 value of exactly `N` bytes.
fn decode<const N: usize>(b64: &str) -> Option<[u8; N]> {
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?
        .try_into()
        .ok()
}

fn decode_u32(b64: &str) -> Option<u32> {
    decode(b64).map(u32::from_be_bytes)
}

/// The HTTP connector every backend is built with: `object_store`'s own reqwest client, with
/// [`StoreChecksums`] added to full-object responses.
#[derive(Debug, Default)]
pub struct ChecksumConnector;

impl HttpConnector for ChecksumConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        install_tls_provider();
        // reqwest refuses to build a client when the system has no CA certificates at all
        // (a bare container, a host without the ca-certificates package), even for plain
        // http, and says only "builder error".
        let inner = ReqwestConnector::default().connect(options).map_err(|e| {
            let reason = match e {
                object_store::Error::Generic { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            object_store::Error::Generic {
                store: "HTTP client",
                source: format!(
                    "{reason}: cannot set up the HTTP client; the usual cause is a system \
                         without CA certificates (install the ca-certificates package, or set \
                         SSL_CERT_FILE to a PEM bundle)"
                )
                .into(),
            }
        })?;
        Ok(HttpClient::new(ChecksumService { inner }))
    }
}

/// Makes `ring` the process's TLS provider, once, before the first client is built: reqwest is
/// built without a bundled one (Cargo.toml says why), and rustls refuses to make a client
/// without a provider. A provider some other part of the process installed first is kept.
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[derive(Debug)]
struct ChecksumService {
    inner: HttpClient,
}

#[async_trait::async_trait]
impl HttpService for ChecksumService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let is_get = req.method() == http::Method::GET;
        let is_head = req.method() == http::Method::HEAD;
        let head_as_get = is_head.then(|| one_byte_get(&req));
        let mut res = self.inner.execute(req).await?;
        if let Some(get) = head_as_get.filter(|_| res.status() == http::StatusCode::NOT_IMPLEMENTED)
        {
            res = head_answer_from(self.inner.execute(get).await?);
        }
        if (is_get || is_head) && res.status().is_success() {
            fill_missing_validators(res.headers_mut());
        }
        if is_get && res.status() == http::StatusCode::OK {
            let sums = StoreChecksums::from_headers(res.headers());
            if !sums.is_empty() {
                res.extensions_mut().insert(sums);
            }
        }
        Ok(res)
    }
}

/// The ETag given to an answer that carries none (see [`fill_missing_validators`]); [`etag`]
/// turns it back into "no ETag".
const NO_ETAG: &str = "\"shardfs:no-etag\"";

/// An object's ETag as the store sent it: `None` for one it did not send.
pub(crate) fn etag(e_tag: Option<String>) -> Option<String> {
    e_tag.filter(|t| t != NO_ETAG)
}

/// Makes an object answer without `Last-Modified` or `ETag` (gcp-storage-emulator sends
/// neither) acceptable to `object_store`, whose GCS and Azure clients refuse it: the missing
/// date becomes the epoch (what `object_store` itself assumes for S3 and HTTP), the missing
/// ETag a marker that [`etag`] reads as none. shardfs needs neither: no ETag means no version
/// to compare, and the checks of a store without checksums apply (docs/SEMANTICS.md).
fn fill_missing_validators(headers: &mut http::HeaderMap) {
    if !headers.contains_key(http::header::LAST_MODIFIED) {
        headers.insert(
            http::header::LAST_MODIFIED,
            http::HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"),
        );
    }
    if !headers.contains_key(http::header::ETAG) {
        headers.insert(http::header::ETAG, http::HeaderValue::from_static(NO_ETAG));
    }
}

/// The HEAD `req` asked again as a GET of the object's first byte, for a store that does not
/// implement HEAD (gcp-storage-emulator answers it 501).
fn one_byte_get(req: &HttpRequest) -> HttpRequest {
    let mut get = http::Request::new(object_store::client::HttpRequestBody::empty());
    *get.method_mut() = http::Method::GET;
    *get.uri_mut() = req.uri().clone();
    *get.version_mut() = req.version();
    *get.headers_mut() = req.headers().clone();
    get.headers_mut().insert(
        http::header::RANGE,
        http::HeaderValue::from_static("bytes=0-0"),
    );
    get
}

/// A HEAD's answer made from the answer to [`one_byte_get`]: its headers with the object's
/// size as `Content-Length` (from `Content-Range`: `bytes 0-0/N`, or `bytes */0` for an empty
/// object), and no body. Any other answer (a 404, ...) is passed on as it is.
fn head_answer_from(get: HttpResponse) -> HttpResponse {
    let total = header_str(get.headers(), "content-range")
        .and_then(|r| r.rsplit_once('/'))
        .and_then(|(_, n)| n.trim().parse::<u64>().ok());
    let size = match (get.status(), total) {
        (http::StatusCode::OK, _) => None,
        (http::StatusCode::PARTIAL_CONTENT | http::StatusCode::RANGE_NOT_SATISFIABLE, Some(n)) => {
            Some(n)
        }
        _ => return get,
    };
    let (mut parts, _) = get.into_parts();
    if let Some(n) = size {
        parts.status = http::StatusCode::OK;
        parts.headers.remove(http::header::CONTENT_RANGE);
        parts.headers.insert(http::header::CONTENT_LENGTH, n.into());
    }
    HttpResponse::from_parts(parts, bytes::Bytes::new().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    // "hello world": MD5 5eb63bbbe01eeed093cb22bb8f5acdc3, CRC32C c99465aa.
    const MD5_B64: &str = "XrY7u+Ae7tCTyyK7j1rNww==";
    const CRC_B64: &str = "yZRlqg==";

    #[test]
    fn gcs_hash_header_gives_both_sums_and_checks_bytes() {
        let s = StoreChecksums::from_headers(&headers(&[(
            "x-goog-hash",
            &format!("crc32c={CRC_B64},md5={MD5_B64}"),
        )]));
        assert_eq!(s.crc32c, Some(0xc99465aa));
        assert_eq!(
            hex::encode(s.md5.unwrap()),
            "5eb63bbbe01eeed093cb22bb8f5acdc3"
        );
        assert!(s.check(b"hello world").is_ok());
        let e = s.check(b"hello worle").unwrap_err();
        assert_eq!(e.name, "CRC32C", "{e}");
    }

    #[test]
    fn gcs_sends_two_hash_headers_sometimes() {
        let s = StoreChecksums::from_headers(&headers(&[
            ("x-goog-hash", &format!("crc32c={CRC_B64}")),
            ("x-goog-hash", &format!("md5={MD5_B64}")),
        ]));
        assert!(s.crc32c.is_some() && s.md5.is_some());
    }

    #[test]
    fn azure_content_md5_and_s3_full_object_crc() {
        let s = StoreChecksums::from_headers(&headers(&[("Content-MD5", MD5_B64)]));
        assert!(s.md5.is_some() && s.crc32c.is_none());
        assert!(s.check(b"hello world").is_ok());
        assert_eq!(s.check(b"hello").unwrap_err().name, "MD5");
        // A composite (per-part) S3 checksum is not a checksum of the object: ignored.
        let composite = StoreChecksums::from_headers(&headers(&[
            ("x-amz-checksum-crc32c", "AAAAAA==-3"),
            ("x-amz-checksum-type", "COMPOSITE"),
        ]));
        assert!(composite.is_empty());
        let full = StoreChecksums::from_headers(&headers(&[
            ("x-amz-checksum-crc32c", CRC_B64),
            ("x-amz-checksum-type", "FULL_OBJECT"),
        ]));
        assert_eq!(full.crc32c, Some(0xc99465aa));
    }

    #[test]
    fn s3_full_object_checksums_of_every_algorithm_check_the_bytes() {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let data = b"123456789";
        // Check values of the CRC catalogue: CRC-64/NVME cbf43926 is CRC-32/ISO-HDLC's.
        let crc64 = 0xae8b_1486_0a79_9888u64;
        let crc32 = 0xcbf4_3926u32;
        use sha2::Digest;
        let sha256: [u8; 32] = sha2::Sha256::digest(data).into();
        // CRC64NVME is always of the whole object, with or without a type header.
        let only_crc64 = StoreChecksums::from_headers(&headers(&[(
            "x-amz-checksum-crc64nvme",
            &b64(&crc64.to_be_bytes()),
        )]));
        assert_eq!(only_crc64.crc64nvme, Some(crc64));
        assert!(only_crc64.check(data).is_ok());
        let err = only_crc64.check(b"123456780").unwrap_err();
        assert_eq!(err.name, "CRC64NVME", "{err}");
        // The others only as a full-object checksum.
        let pairs = [
            ("x-amz-checksum-crc32", b64(&crc32.to_be_bytes())),
            ("x-amz-checksum-sha256", b64(&sha256)),
        ];
        let untyped: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert!(StoreChecksums::from_headers(&headers(&untyped)).is_empty());
        let mut typed = untyped.clone();
        typed.push(("x-amz-checksum-type", "FULL_OBJECT"));
        let full = StoreChecksums::from_headers(&headers(&typed));
        assert_eq!((full.crc32, full.sha256), (Some(crc32), Some(sha256)));
        assert!(full.check(data).is_ok());
        let err = full.check(b"12345678").unwrap_err();
        assert_eq!(err.name, "CRC32", "{err}");
        // A composite CRC64NVME (not something S3 makes) is not taken as the object's.
        let composite = StoreChecksums::from_headers(&headers(&[
            ("x-amz-checksum-crc64nvme", &b64(&crc64.to_be_bytes())),
            ("x-amz-checksum-type", "COMPOSITE"),
        ]));
        assert!(composite.is_empty());
    }

    #[test]
    fn malformed_values_give_no_checksum() {
        for bad in [
            "md5=%%%",
            "md5=AAAA",
            "crc32c=",
            "crc32c=AAAAAAAAAA==",
            "junk",
        ] {
            let s = StoreChecksums::from_headers(&headers(&[("x-goog-hash", bad)]));
            assert!(s.is_empty(), "{bad}: {s:?}");
        }
        assert!(
            StoreChecksums::from_headers(&headers(&[("content-md5", "not base64!")])).is_empty()
        );
    }
}
