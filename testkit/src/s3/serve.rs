//! The accept loop: SigV4-checked S3 over HTTP/1 and HTTP/2 on a TCP listener, with the link
//! emulation (first-byte latency, a per-connection bandwidth cap), `GET /__bench/stats`
//! (unsigned, undelayed), request logging, and the connection drops of `Reset` rules.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::bucket::{Buckets, BucketsS3};
use super::throttle::Throttled;

/// The remote link the server emulates, and whether it logs requests.
#[derive(Debug, Clone, Default)]
pub struct Link {
    /// Added before each request is answered.
    pub latency: Duration,
    /// Cap per TCP connection, in bytes per second, on what it sends and on what it
    /// receives (each way on its own).
    pub bytes_per_sec: Option<f64>,
    /// Log every request (method, path, Range header, status, time) to stderr.
    pub log_requests: bool,
}

/// Who may do what: signed requests anything; unsigned ones GET and HEAD while the buckets are
/// public ([`Buckets::public_read`]), else nothing.
struct PublicRead(Arc<Buckets>);

#[async_trait::async_trait]
impl s3s::access::S3Access for PublicRead {
    async fn check(&self, cx: &mut s3s::access::S3AccessContext<'_>) -> s3s::S3Result<()> {
        let read = matches!(*cx.method(), http::Method::GET | http::Method::HEAD);
        if cx.credentials().is_some() || (read && self.0.public_read.load(Ordering::Relaxed)) {
            Ok(())
        } else {
            Err(s3s::s3_error!(AccessDenied, "Signature is required"))
        }
    }
}

fn json(s: String) -> hyper::Response<s3s::Body> {
    hyper::Response::new(s3s::Body::from(Bytes::from(s)))
}

/// Serves `buckets` on `listener` to clients that sign with `access_key` and `secret_key`,
/// until the runtime stops.
pub async fn serve(
    listener: tokio::net::TcpListener,
    buckets: Arc<Buckets>,
    access_key: &str,
    secret_key: &str,
    link: Link,
) {
    let service = {
        let mut b = s3s::service::S3ServiceBuilder::new(BucketsS3(buckets.clone()));
        b.set_auth(s3s::auth::SimpleAuth::from_single(access_key, secret_key));
        b.set_access(PublicRead(buckets.clone()));
        b.build()
    };
    let latency = link.latency;
    let log = link.log_requests;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        buckets.stats.connections.fetch_add(1, Ordering::Relaxed);
        let io = Throttled::new(stream, link.bytes_per_sec, buckets.stats.clone());
        let service = service.clone();
        let buckets = buckets.clone();
        tokio::spawn(async move {
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let service = service.clone();
                    let buckets = buckets.clone();
                    async move {
                        if req.uri().path() == "/__bench/stats" {
                            let s = buckets.stats.to_json();
                            let s = format!(
                                "{},\"faults\":{}}}",
                                s.trim_end_matches('}'),
                                buckets.faults.to_json()
                            );
                            return Ok(json(s));
                        }
                        if !latency.is_zero() {
                            tokio::time::sleep(latency).await;
                        }
                        let line = log.then(|| {
                            let range = req
                                .headers()
                                .get("range")
                                .map(|v| v.to_str().unwrap_or("?").to_string());
                            (
                                req.method().clone(),
                                req.uri().clone(),
                                range,
                                std::time::Instant::now(),
                            )
                        });
                        let resp = hyper::service::Service::call(&service, req).await;
                        if let Some((method, uri, range, t0)) = line {
                            let status = resp.as_ref().map(|r| r.status().as_u16()).unwrap_or(0);
                            eprintln!(
                                "{method} {uri} range={range:?} -> {status} in {:?}",
                                t0.elapsed()
                            );
                        }
                        // A `Reset` rule answers nothing: failing the service drops the
                        // connection.
                        let reset = buckets
                            .resets_pending
                            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                                n.checked_sub(1)
                            })
                            .is_ok();
                        match resp {
                            Ok(r) if !reset => Ok(r),
                            Ok(_) => Err(s3s::HttpError::new(Box::new(std::io::Error::other(
                                "injected reset",
                            )))),
                            Err(e) => Err(e),
                        }
                    }
                });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(io), svc)
                .await;
        });
    }
}
