//! `ObjectStoreBackend`: the one place that talks to `object_store`.
//!
//! It builds the right client for a [`Source`] and resolves keys under the root; its errors
//! are sorted into [`StoreError`] variants by [`super::classify`].
//! Its own retries are disabled (`max_retries = 0`): [`super::ResilientStore`] retries.

use super::aws_profile::load_profile;
use super::classify::{body_error, map_error};
use super::GetOptions;
use super::{
    ObjectInfo, ObjectKey, Source, SourceKind, Store, StoreError, StoreOptions, TransientKind,
};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::client::HttpErrorKind;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};
use std::ops::Range;
use std::sync::Arc;

/// A [`Store`] over any `object_store` backend, rooted at the dataset folder.
pub struct ObjectStoreBackend {
    inner: Arc<dyn ObjectStore>,
    root: Path,
    source: Source,
    /// How to ask S3 for an object's checksums.
    checksum_mode: Option<ChecksumMode>,
}

/// What asking S3 for an object's stored checksums takes: `x-amz-checksum-mode: ENABLED`
/// must be covered by the request's signature, which `object_store`'s own requests cannot
/// carry, so the HEAD is presigned with the header bound to it and sent by a client of the
/// same settings. Unsigned (`--no-sign-request`: public buckets) the header goes as it is, to
/// the object's URL as the client addresses it: a presign with placeholder credentials (made
/// locally) with its signature query dropped.
struct ChecksumMode {
    s3: Arc<object_store::aws::AmazonS3>,
    http: object_store::client::HttpClient,
    /// The HEAD goes without a signature.
    unsigned: bool,
}

/// How long a presigned checksum request stays valid (it is sent at once).
const CHECKSUM_URL_LIFETIME: std::time::Duration = std::time::Duration::from_secs(300);

impl std::fmt::Debug for ObjectStoreBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectStoreBackend({})", self.source.canonical())
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether `url` is plain HTTP, which the client then has to be allowed (emulators, proxies).
fn plain_http(url: &str) -> bool {
    url.starts_with("http://")
}

impl ObjectStoreBackend {
    /// Builds the client for `source`. Nothing is fetched yet; configuration problems
    /// (unreadable profile file, bad endpoint URL) are reported here.
    pub fn open(source: &Source, opts: &StoreOptions) -> Result<Self, StoreError> {
        Self::open_with(source, opts, false)
    }

    /// [`ObjectStoreBackend::open`] for a client that uploads (`shardfs pack`'s DEST): on S3
    /// its bodies are sent as `UNSIGNED-PAYLOAD` with an `x-amz-checksum-crc64nvme` header
    /// (covered by the signature), so the store still checks every byte it receives, and
    /// neither side pays a SHA-256 of every uploaded byte for SigV4.
    pub fn open_for_writes(source: &Source, opts: &StoreOptions) -> Result<Self, StoreError> {
        Self::open_with(source, opts, true)
    }

    fn open_with(source: &Source, opts: &StoreOptions, writes: bool) -> Result<Self, StoreError> {
        let cfg_err = |reason: String| {
            let url = source.canonical().to_string();
            let reason = match &source.kind {
                SourceKind::Gcs { .. } | SourceKind::Azure { .. } => {
                    format!("{reason}; {}", super::error::endpoint_hint(&url))
                }
                _ => reason,
            };
            StoreError::Config {
                source_url: url,
                reason,
            }
        };
        let retry = RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        };
        let client = |allow_http: bool| {
            ClientOptions::new()
                .with_timeout(opts.request_timeout)
                .with_connect_timeout(opts.connect_timeout)
                .with_read_timeout(opts.stall_timeout)
                .with_allow_http(allow_http)
        };
        let mut checksum_mode = None;
        let inner: Arc<dyn ObjectStore> = match &source.kind {
            SourceKind::Local { root } => {
                if !root.is_dir() {
                    return Err(StoreError::NotFound {
                        url: source.canonical().to_string(),
                        detail: "no such directory".into(),
                    });
                }
                Arc::new(
                    object_store::local::LocalFileSystem::new_with_prefix(root)
                        .map_err(|e| cfg_err(e.to_string()))?,
                )
            }
            SourceKind::S3 { bucket } => {
                use object_store::aws::AmazonS3Builder;
                let mut b = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry);
                let endpoint = opts
                    .endpoint_url
                    .clone()
                    .or_else(|| env_nonempty("AWS_ENDPOINT_URL_S3"))
                    .or_else(|| env_nonempty("AWS_ENDPOINT_URL"))
                    .or_else(|| env_nonempty("S3_ENDPOINT_URL"));
                let mut allow_http = false;
                if let Some(ep) = &endpoint {
                    let url = url::Url::parse(ep)
                        .map_err(|e| cfg_err(format!("endpoint URL {ep:?}: {e}")))?;
                    allow_http = url.scheme() == "http";
                    // S3-compatible servers (moto, MinIO, s3s, Ceph) expect path-style addressing.
                    b = b
                        .with_endpoint(ep.trim_end_matches('/'))
                        .with_virtual_hosted_style_request(false);
                }
                let profile = if opts.no_sign_request {
                    Default::default()
                } else {
                    load_profile().map_err(|e| cfg_err(e.to_string()))?
                };
                let region = opts
                    .region
                    .clone()
                    .or_else(|| env_nonempty("AWS_REGION"))
                    .or_else(|| env_nonempty("AWS_DEFAULT_REGION"))
                    .or(profile.region.clone())
                    .unwrap_or_else(|| "us-east-1".to_string());
                b = b
                    .with_region(region)
                    .with_client_options(client(allow_http))
                    .with_http_connector(super::ChecksumConnector);
                if writes {
                    b = b
                        .with_unsigned_payload(true)
                        .with_checksum_algorithm(object_store::aws::Checksum::CRC64NVME);
                }
                if opts.no_sign_request {
                    b = b.with_skip_signature(true);
                } else if let Some(c) = &opts.credentials {
                    b = b
                        .with_access_key_id(&c.access_key_id)
                        .with_secret_access_key(&c.secret_access_key);
                    if let Some(token) = &c.session_token {
                        b = b.with_token(token);
                    }
                } else if env_nonempty("AWS_ACCESS_KEY_ID").is_none() {
                    if let (Some(id), Some(secret)) =
                        (profile.access_key_id, profile.secret_access_key)
                    {
                        b = b.with_access_key_id(id).with_secret_access_key(secret);
                        if let Some(token) = profile.session_token {
                            b = b.with_token(token);
                        }
                    }
                }
                // Addresses objects as `b` does; its placeholder credentials never leave
                // this process (see `ChecksumMode`).
                let addressing = opts.no_sign_request.then(|| {
                    b.clone()
                        .with_skip_signature(false)
                        .with_access_key_id("unsigned")
                        .with_secret_access_key("unsigned")
                });
                let s3 = Arc::new(b.build().map_err(|e| cfg_err(e.to_string()))?);
                let presigner = match addressing {
                    Some(a) => Arc::new(a.build().map_err(|e| cfg_err(e.to_string()))?),
                    None => s3.clone(),
                };
                use object_store::client::HttpConnector;
                let http = super::ChecksumConnector
                    .connect(&client(allow_http))
                    .map_err(|e| cfg_err(e.to_string()))?;
                checksum_mode = Some(ChecksumMode {
                    s3: presigner,
                    http,
                    unsigned: opts.no_sign_request,
                });
                s3
            }
            SourceKind::Gcs { bucket } => {
                use object_store::gcp::GoogleCloudStorageBuilder;
                // Google's client libraries talk to an emulator named by STORAGE_EMULATOR_HOST
                // (`host:port` or a URL), without credentials; so do we, and so does any other
                // endpoint given without credentials (an emulator or a proxy: never the
                // instance metadata service).
                let emulator = env_nonempty("STORAGE_EMULATOR_HOST").map(|h| {
                    if h.contains("://") {
                        h
                    } else {
                        format!("http://{h}")
                    }
                });
                let endpoint = opts
                    .endpoint_url
                    .clone()
                    .or_else(|| emulator.clone())
                    .or_else(|| env_nonempty("GOOGLE_BASE_URL"));
                let has_credentials = [
                    "GOOGLE_SERVICE_ACCOUNT",
                    "GOOGLE_SERVICE_ACCOUNT_PATH",
                    "GOOGLE_SERVICE_ACCOUNT_KEY",
                    "GOOGLE_APPLICATION_CREDENTIALS",
                ]
                .iter()
                .any(|v| env_nonempty(v).is_some());
                let mut b = GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry)
                    .with_client_options(client(endpoint.as_deref().is_some_and(plain_http)))
                    .with_http_connector(super::ChecksumConnector)
                    .with_skip_signature(
                        opts.no_sign_request || (endpoint.is_some() && !has_credentials),
                    );
                if let Some(e) = &endpoint {
                    b = b.with_base_url(e.trim_end_matches('/'));
                }
                Arc::new(b.build().map_err(|e| cfg_err(e.to_string()))?)
            }
            SourceKind::Azure { container } => {
                use object_store::azure::MicrosoftAzureBuilder;
                // AZURE_STORAGE_USE_EMULATOR=true (+ AZURITE_BLOB_STORAGE_URL) selects Azurite
                // through object_store's own settings; --endpoint-url names an account URL.
                let endpoint = opts.endpoint_url.as_deref();
                let mut b = MicrosoftAzureBuilder::from_env()
                    .with_container_name(container)
                    .with_retry(retry)
                    .with_client_options(client(endpoint.is_some_and(plain_http)))
                    .with_http_connector(super::ChecksumConnector)
                    .with_skip_signature(opts.no_sign_request);
                if let Some(e) = endpoint {
                    b = b.with_endpoint(e.trim_end_matches('/').to_string());
                }
                Arc::new(b.build().map_err(|e| cfg_err(e.to_string()))?)
            }
            SourceKind::Http { base } => {
                let b = object_store::http::HttpBuilder::new()
                    .with_url(base.clone())
                    .with_retry(retry)
                    .with_client_options(client(plain_http(base)))
                    .with_http_connector(super::ChecksumConnector);
                Arc::new(b.build().map_err(|e| cfg_err(e.to_string()))?)
            }
        };
        let root = if source.prefix.is_empty() {
            Path::default()
        } else {
            Path::parse(&source.prefix).map_err(|e| cfg_err(e.to_string()))?
        };
        Ok(ObjectStoreBackend {
            inner,
            root,
            source: source.clone(),
            checksum_mode,
        })
    }

    /// The parsed source this backend serves.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The `object_store` client and the root path under it, for writers (`store::put`).
    pub(crate) fn client(&self) -> (Arc<dyn ObjectStore>, Path) {
        (self.inner.clone(), self.root.clone())
    }

    /// The MD5s an ETag stands for. Only S3 ETags can be an MD5 of the object; other
    /// stores' ETags are versions.
    fn etag_md5s(&self, e_tag: Option<&str>) -> super::EtagMd5s {
        match self.source.kind {
            super::SourceKind::S3 { .. } => {
                (e_tag.and_then(etag_md5), e_tag.and_then(etag_multipart))
            }
            _ => (None, None),
        }
    }

    fn location(&self, key: &ObjectKey) -> Result<Path, StoreError> {
        let joined = if self.root.as_ref().is_empty() {
            key.as_str().to_string()
        } else {
            format!("{}/{}", self.root, key)
        };
        Path::parse(&joined).map_err(|e| StoreError::InvalidKey {
            key: key.to_string(),
            reason: e.to_string(),
        })
    }

    fn relative_key(&self, location: &Path) -> Option<ObjectKey> {
        let root: Vec<_> = self.root.parts().collect();
        let parts: Vec<_> = location.parts().collect();
        if parts.len() <= root.len() || parts[..root.len()] != root[..] {
            return None;
        }
        let rel: Vec<String> = parts[root.len()..]
            .iter()
            .map(|p| p.as_ref().to_string())
            .collect();
        ObjectKey::new(rel.join("/")).ok()
    }

    /// S3's stored checksums of `key`, asked for with a presigned HEAD that carries
    /// `x-amz-checksum-mode: ENABLED` (unsigned: a plain HEAD with that header). A store that
    /// refuses the request (a 4xx other than a missing object) gives none. Errors never show
    /// the presigned URL, whose query holds a signature.
    async fn checksums_with_mode(
        &self,
        mode: &ChecksumMode,
        key: &ObjectKey,
    ) -> Result<super::StoreChecksums, StoreError> {
        use object_store::signer::{SignedUrlOptions, Signer};
        let url = self.url_of(key);
        let loc = self.location(key)?;
        let header = http::HeaderName::from_static("x-amz-checksum-mode");
        let enabled = http::HeaderValue::from_static("ENABLED");
        let options =
            SignedUrlOptions::default().with_signed_header(header.clone(), enabled.clone());
        let mut presigned = mode
            .s3
            .signed_url_opts(http::Method::HEAD, &loc, CHECKSUM_URL_LIFETIME, &options)
            .await
            .map_err(|e| map_error(e, &url))?;
        if mode.unsigned {
            presigned.set_query(None);
        }
        let request = http::Request::builder()
            .method(http::Method::HEAD)
            .uri(presigned.as_str())
            .header(header, enabled)
            .body(object_store::client::HttpRequestBody::empty())
            .map_err(|e| StoreError::Other {
                url: url.clone(),
                detail: format!("cannot make the checksum request: {e}"),
            })?;
        let response = mode.http.execute(request).await.map_err(|e| {
            let (kind, what) = match e.kind() {
                HttpErrorKind::Connect => (TransientKind::Connection, "cannot connect"),
                HttpErrorKind::Timeout => (TransientKind::Timeout, "timed out"),
                _ => (TransientKind::Connection, "the connection failed"),
            };
            StoreError::Transient {
                url: url.clone(),
                kind,
                detail: format!("asking for the object's checksums: {what}"),
            }
        })?;
        let status = response.status();
        let transient = |kind| StoreError::Transient {
            url: url.clone(),
            kind,
            detail: format!("asking for the object's checksums: HTTP {status}"),
        };
        match status.as_u16() {
            200..=299 => Ok(super::StoreChecksums::from_headers(response.headers())),
            404 => Err(StoreError::NotFound {
                url: url.clone(),
                detail: String::new(),
            }),
            429 | 503 => Err(transient(TransientKind::Throttled)),
            408 => Err(transient(TransientKind::Timeout)),
            500..=599 => Err(transient(TransientKind::ServerError)),
            _ => {
                tracing::debug!(url = %url, status = status.as_u16(), "the store refused a checksum-mode HEAD; checking by ETag");
                Ok(super::StoreChecksums::default())
            }
        }
    }

    /// Starts a GET of `key` (of `range`, when given) and checks the range lies inside the
    /// object; the body is left to the caller.
    async fn start_get(
        &self,
        key: &ObjectKey,
        url: &str,
        range: Option<Range<u64>>,
    ) -> Result<object_store::GetResult, StoreError> {
        let loc = self.location(key)?;
        let opts = object_store::GetOptions::new().with_range(range.clone());
        let result = self
            .inner
            .get_opts(&loc, opts)
            .await
            .map_err(|e| map_error(e, url))?;
        if let Some(r) = range.filter(|r| r.end > result.meta.size) {
            return Err(StoreError::Other {
                url: url.to_string(),
                detail: format!(
                    "range {}..{} is beyond the end of the object ({} bytes)",
                    r.start, r.end, result.meta.size
                ),
            });
        }
        Ok(result)
    }

    /// The body of `result` into `dest` as it arrives: exactly `dest.len()` bytes.
    async fn body_into(
        result: object_store::GetResult,
        dest: &mut [u8],
        url: &str,
    ) -> Result<(), StoreError> {
        let mut body = result.into_stream();
        let mut at = 0usize;
        while let Some(chunk) = body.try_next().await.transpose() {
            let chunk = chunk.map_err(|e| body_error(e, url))?;
            let end = at.saturating_add(chunk.len());
            let Some(slot) = dest.get_mut(at..end) else {
                return Err(StoreError::Other {
                    url: url.to_string(),
                    detail: format!(
                        "the server sent more than the {} bytes asked for",
                        dest.len()
                    ),
                });
            };
            slot.copy_from_slice(&chunk);
            at = end;
        }
        if at != dest.len() {
            return Err(StoreError::ShortBody {
                url: url.to_string(),
                expected: dest.len() as u64,
                got: at as u64,
            });
        }
        Ok(())
    }

    /// The body of `result` in a buffer of its own: exactly `expected` bytes.
    async fn body(
        result: object_store::GetResult,
        expected: u64,
        url: &str,
    ) -> Result<Bytes, StoreError> {
        let bytes = match result.payload {
            // A local file is read at once into a buffer of its size.
            object_store::GetResultPayload::File(..) => {
                result.bytes().await.map_err(|e| body_error(e, url))?
            }
            object_store::GetResultPayload::Stream(_) => {
                collect_exact(result.into_stream(), expected, url).await?
            }
        };
        if bytes.len() as u64 != expected {
            return Err(StoreError::ShortBody {
                url: url.to_string(),
                expected,
                got: bytes.len() as u64,
            });
        }
        Ok(bytes)
    }
}

/// Largest buffer reserved up front for a body from the Content-Length the server claims; a
/// longer body grows it as it arrives.
const MAX_PRESIZED_BODY: u64 = 1 << 30;

/// A streamed body copied into one buffer of its own, sized for the `expected` bytes.
///
/// Not zero-copy on purpose: the HTTP client hands out body chunks as slices of its read
/// buffer (up to ~400 KiB per connection), so keeping a small chunk (a ranged sample kept in the
/// memory tier) would keep that whole buffer alive while counting only the chunk.
async fn collect_exact(
    mut body: futures::stream::BoxStream<'static, object_store::Result<Bytes>>,
    expected: u64,
    url: &str,
) -> Result<Bytes, StoreError> {
    let capacity = usize::try_from(expected.min(MAX_PRESIZED_BODY)).unwrap_or(0);
    let mut out = bytes::BytesMut::with_capacity(capacity);
    while let Some(chunk) = body.try_next().await.map_err(|e| body_error(e, url))? {
        if out.len() as u64 + chunk.len() as u64 > expected {
            return Err(StoreError::Other {
                url: url.to_string(),
                detail: format!("the server sent more than the {expected} bytes announced"),
            });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// The MD5 an S3 ETag stands for: 32 hex digits (quotes allowed). Multipart ETags (`…-N`)
/// are not an MD5 of the object, and neither are the ETags of SSE-KMS/SSE-C objects, which look
/// the same: the cache tells those apart by downloading twice (see `cache::dataset`).
pub fn etag_md5(e_tag: &str) -> Option<[u8; 16]> {
    let t = e_tag.trim().trim_start_matches("W/").trim_matches('"');
    if t.len() != 32 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 16];
    hex::decode_to_slice(t, &mut out).ok()?;
    Some(out)
}

/// An S3 multipart ETag `HEX32-N`: the MD5 of the concatenated part MD5s and N.
pub fn etag_multipart(e_tag: &str) -> Option<([u8; 16], u32)> {
    let t = e_tag.trim().trim_start_matches("W/").trim_matches('"');
    let (hex_part, n) = t.split_once('-')?;
    let parts: u32 = n.parse().ok().filter(|&n| n >= 1)?;
    Some((etag_md5(hex_part)?, parts))
}

#[async_trait::async_trait]
impl Store for ObjectStoreBackend {
    fn url_of(&self, key: &ObjectKey) -> String {
        self.source.url_of(key)
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectInfo, StoreError> {
        let loc = self.location(key)?;
        let meta = self
            .inner
            .head(&loc)
            .await
            .map_err(|e| map_error(e, &self.url_of(key)))?;
        Ok(ObjectInfo {
            key: key.clone(),
            size: meta.size,
            e_tag: super::checksums::etag(meta.e_tag),
        })
    }

    async fn checksums(&self, key: &ObjectKey) -> Result<super::StoreChecksums, StoreError> {
        match &self.checksum_mode {
            Some(mode) => self.checksums_with_mode(mode, key).await,
            None => Ok(super::StoreChecksums::default()),
        }
    }

    async fn get_opts(
        &self,
        key: &ObjectKey,
        opts: GetOptions<'_>,
    ) -> Result<super::Fetched, StoreError> {
        let url = self.url_of(key);
        let super::GetOptions { range, into } = opts;
        if range.as_ref().is_some_and(|r| r.start >= r.end) {
            return Ok(super::Fetched::plain(Bytes::new()));
        }
        let result = self.start_get(key, &url, range.clone()).await?;
        // A ranged answer carries the object's ETag; its checksum headers, if any, are
        // the range's and are not used.
        let (md5, multipart_md5) = self.etag_md5s(result.meta.e_tag.as_deref());
        let store_sums = match range {
            None => result
                .extensions
                .get::<super::StoreChecksums>()
                .copied()
                .unwrap_or_default(),
            Some(_) => super::StoreChecksums::default(),
        };
        let bytes = match into {
            Some(dest) => {
                Self::body_into(result, dest, &url).await?;
                Bytes::new()
            }
            None => {
                let expected = range
                    .map(|r| r.end - r.start)
                    .unwrap_or(result.range.end - result.range.start);
                Self::body(result, expected, &url).await?
            }
        };
        Ok(super::Fetched {
            bytes,
            md5,
            multipart_md5,
            store_sums,
        })
    }

    async fn list(&self, prefix: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError> {
        let (loc, url) = match prefix {
            Some(p) => (self.location(p)?, self.url_of(p)),
            None => (self.root.clone(), self.source.canonical().to_string()),
        };
        let metas: Vec<_> = self
            .inner
            .list(Some(&loc))
            .try_collect()
            .await
            .map_err(|e| map_error(e, &url))?;
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let key = self.relative_key(&m.location)?;
                Some(ObjectInfo {
                    key,
                    size: m.size,
                    e_tag: super::checksums::etag(m.e_tag),
                })
            })
            .collect())
    }
}
