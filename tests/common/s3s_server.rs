//! An in-process S3 server built on the `s3s` crate: it verifies SigV4 (one access key),
//! serves an in-memory bucket (GetObject with ranges, HeadObject, ListObjectsV2), counts
//! requests per key, and injects faults at the protocol level: 503 SlowDown, 500, dropped
//! connections, bodies cut short (the advertised Content-Length is not met), corrupted
//! bytes, latency and a bandwidth cap.
//!
//! It runs on its own thread and runtime, so blocking clients in the test thread can use it.

use bytes::Bytes;
use s3s::dto::{
    GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput, ListObjectsV2Input,
    ListObjectsV2Output, Object, StreamingBlob, Timestamp,
};
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The access key the server accepts.
pub const ACCESS_KEY: &str = "shardfs-test-key";
/// The matching secret.
pub const SECRET_KEY: &str = "shardfs-test-secret";

/// A fault the server injects.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerFault {
    /// 503 SlowDown.
    SlowDown,
    /// 500 InternalError.
    InternalError,
    /// Close the connection without answering.
    Reset,
    /// Send half of the body, then fail the stream (Content-Length unmet).
    Truncate,
    /// Flip one byte in the middle of the body.
    Corrupt,
    /// Wait before answering.
    Latency(Duration),
    /// Stream the body at this many bytes per second.
    Bandwidth(u64),
}

#[derive(Debug)]
struct Rule {
    fault: ServerFault,
    key: Option<String>,
    remaining: Option<u64>,
}

/// Requests seen for one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// GetObject without a range.
    pub gets: u64,
    /// GetObject with a range.
    pub range_gets: u64,
    /// HeadObject.
    pub heads: u64,
    /// Bytes of bodies started.
    pub bytes: u64,
}

/// Shared state of the server.
#[derive(Debug, Default)]
pub struct State {
    objects: Mutex<BTreeMap<(String, String), Bytes>>,
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<HashMap<String, Seen>>,
    resets_pending: Mutex<u64>,
}

/// A running server.
pub struct FakeS3 {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    state: Arc<State>,
}

impl FakeS3 {
    /// Starts a server with no objects.
    pub fn start() -> FakeS3 {
        let state = Arc::new(State::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let st = state.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(serve(st, tx));
        });
        let port = rx.recv().expect("s3s server did not start");
        FakeS3 {
            endpoint: format!("http://127.0.0.1:{port}"),
            state,
        }
    }

    /// Stores one object.
    pub fn put(&self, bucket: &str, key: &str, data: impl Into<Bytes>) {
        self.state
            .objects
            .lock()
            .unwrap()
            .insert((bucket.into(), key.into()), data.into());
    }

    /// Stores every file under `dir` as `prefix/<relative path>`.
    pub fn put_dir(&self, bucket: &str, prefix: &str, dir: &Path) {
        for rel in super::files_under(dir) {
            let key = if prefix.is_empty() {
                rel.clone()
            } else {
                format!("{prefix}/{rel}")
            };
            self.put(bucket, &key, std::fs::read(dir.join(&rel)).unwrap());
        }
    }

    /// Adds a fault rule for `key` (full key in the bucket, or any when `None`), `times`
    /// times (forever when `None`).
    pub fn inject(&self, fault: ServerFault, key: Option<&str>, times: Option<u64>) {
        self.state.rules.lock().unwrap().push(Rule {
            fault,
            key: key.map(str::to_string),
            remaining: times,
        });
    }

    /// Removes all fault rules.
    pub fn clear_faults(&self) {
        self.state.rules.lock().unwrap().clear();
    }

    /// Requests seen for a full key.
    pub fn seen(&self, key: &str) -> Seen {
        self.state
            .seen
            .lock()
            .unwrap()
            .get(key)
            .copied()
            .unwrap_or_default()
    }

    /// Sum of requests over all keys.
    pub fn seen_total(&self) -> Seen {
        let m = self.state.seen.lock().unwrap();
        m.values().fold(Seen::default(), |mut a, s| {
            a.gets += s.gets;
            a.range_gets += s.range_gets;
            a.heads += s.heads;
            a.bytes += s.bytes;
            a
        })
    }

    /// Options that reach this server with its credentials.
    pub fn options(&self) -> shardfs::store::StoreOptions {
        let mut o = super::moto::s3_options(&self.endpoint);
        o.credentials = Some(shardfs::store::StaticCredentials {
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
            session_token: None,
        });
        o
    }
}

impl State {
    /// Consumes matching rules: (latency, bandwidth, the first other fault).
    fn decide(&self, key: &str) -> (Duration, Option<u64>, Option<ServerFault>) {
        let mut rules = self.rules.lock().unwrap();
        let (mut delay, mut bw, mut fault) = (Duration::ZERO, None, None);
        for r in rules.iter_mut() {
            if r.remaining == Some(0) || r.key.as_deref().is_some_and(|k| k != key) {
                continue;
            }
            match &r.fault {
                ServerFault::Latency(d) => delay += *d,
                ServerFault::Bandwidth(b) => bw = Some(*b),
                f if fault.is_none() => fault = Some(f.clone()),
                _ => continue,
            }
            if let Some(n) = r.remaining.as_mut() {
                *n -= 1;
            }
        }
        (delay, bw, fault)
    }
}

struct Bucket(Arc<State>);

fn stamp() -> Timestamp {
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

fn etag(data: &[u8]) -> s3s::dto::ETag {
    s3s::dto::ETag::Strong(format!("{:016x}", xxhash_rust::xxh64::xxh64(data, 0)))
}

impl Bucket {
    fn object(&self, bucket: &str, key: &str) -> S3Result<Bytes> {
        let objects = self.0.objects.lock().unwrap();
        if !objects.keys().any(|(b, _)| b == bucket) {
            return Err(s3_error!(NoSuchBucket));
        }
        objects
            .get(&(bucket.to_string(), key.to_string()))
            .cloned()
            .ok_or_else(|| s3_error!(NoSuchKey))
    }

    /// Applies latency and error faults; returns the bandwidth cap and a body fault.
    async fn faults(&self, key: &str) -> S3Result<(Option<u64>, Option<ServerFault>)> {
        let (delay, bw, fault) = self.0.decide(key);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match fault {
            Some(ServerFault::SlowDown) => {
                let mut e = s3_error!(SlowDown, "Please reduce your request rate.");
                e.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
                Err(e)
            }
            Some(ServerFault::InternalError) => Err(s3_error!(InternalError, "injected")),
            Some(ServerFault::Reset) => {
                *self.0.resets_pending.lock().unwrap() += 1;
                Err(s3_error!(InternalError, "reset"))
            }
            other => Ok((bw, other)),
        }
    }
}

fn body(data: Bytes, bw: Option<u64>, fault: Option<ServerFault>) -> StreamingBlob {
    let data = if fault == Some(ServerFault::Corrupt) && !data.is_empty() {
        let mut v = data.to_vec();
        let mid = v.len() / 2;
        v[mid] ^= 0x5a;
        Bytes::from(v)
    } else {
        data
    };
    let truncate = fault == Some(ServerFault::Truncate);
    let chunk = 64 * 1024;
    let stream = async_stream(data, chunk, bw, truncate);
    StreamingBlob::wrap(stream)
}

fn async_stream(
    data: Bytes,
    chunk: usize,
    bw: Option<u64>,
    truncate: bool,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static {
    let limit = if truncate { data.len() / 2 } else { data.len() };
    futures::stream::unfold(0usize, move |pos| {
        let data = data.clone();
        async move {
            if pos >= limit {
                if truncate && pos < data.len() {
                    return Some((
                        Err(std::io::Error::other("injected truncation")),
                        data.len(),
                    ));
                }
                return None;
            }
            let end = (pos + chunk).min(limit);
            if let Some(bw) = bw {
                tokio::time::sleep(Duration::from_secs_f64(
                    (end - pos) as f64 / bw.max(1) as f64,
                ))
                .await;
            }
            Some((Ok(data.slice(pos..end)), end))
        }
    })
}

#[async_trait::async_trait]
impl S3 for Bucket {
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let full = input.key.to_string();
        let data = self.object(&input.bucket, &input.key)?;
        let total = data.len() as u64;
        let range = match &input.range {
            Some(r) => Some(r.check(total).map_err(|_| s3_error!(InvalidRange))?),
            None => None,
        };
        {
            let mut seen = self.0.seen.lock().unwrap();
            let s = seen.entry(full.clone()).or_default();
            if range.is_some() {
                s.range_gets += 1;
            } else {
                s.gets += 1;
            }
        }
        let (bw, fault) = self.faults(&full).await?;
        let (slice, content_range) = match &range {
            Some(r) => (
                data.slice(r.start as usize..r.end as usize),
                Some(format!("bytes {}-{}/{}", r.start, r.end - 1, total)),
            ),
            None => (data.clone(), None),
        };
        self.0.seen.lock().unwrap().entry(full).or_default().bytes += slice.len() as u64;
        let out = GetObjectOutput {
            content_length: Some(slice.len() as i64),
            content_range,
            e_tag: Some(etag(&data)),
            last_modified: Some(stamp()),
            body: Some(body(slice, bw, fault)),
            ..Default::default()
        };
        Ok(if range.is_some() {
            S3Response::with_status(out, http::StatusCode::PARTIAL_CONTENT)
        } else {
            S3Response::new(out)
        })
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let data = self.object(&input.bucket, &input.key)?;
        self.0
            .seen
            .lock()
            .unwrap()
            .entry(input.key.clone())
            .or_default()
            .heads += 1;
        self.faults(&input.key).await?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(data.len() as i64),
            e_tag: Some(etag(&data)),
            last_modified: Some(stamp()),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let objects = self.0.objects.lock().unwrap();
        if !objects.keys().any(|(b, _)| *b == input.bucket) {
            return Err(s3_error!(NoSuchBucket));
        }
        let contents: Vec<Object> = objects
            .iter()
            .filter(|((b, k), _)| *b == input.bucket && k.starts_with(&prefix))
            .map(|((_, k), v)| Object {
                key: Some(k.clone()),
                size: Some(v.len() as i64),
                e_tag: Some(etag(v)),
                last_modified: Some(stamp()),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: input.prefix,
            key_count: Some(contents.len() as i32),
            contents: Some(contents),
            is_truncated: Some(false),
            ..Default::default()
        }))
    }
}

async fn serve(state: Arc<State>, ready: std::sync::mpsc::Sender<u16>) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let service = {
        let mut b = s3s::service::S3ServiceBuilder::new(Bucket(state.clone()));
        b.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        b.build()
    };
    ready.send(port).unwrap();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let service = service.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let service = service.clone();
                let state = state.clone();
                async move {
                    let resp = hyper::service::Service::call(&service, req).await;
                    // A Reset fault answers nothing: failing the service drops the connection.
                    let reset = {
                        let mut pending = state.resets_pending.lock().unwrap();
                        let r = *pending > 0;
                        if r {
                            *pending -= 1;
                        }
                        r
                    };
                    match resp {
                        Ok(r) if !reset => Ok(r),
                        _ => Err(std::io::Error::other("injected reset or service error")),
                    }
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
