//! A per-connection bandwidth cap: a TCP stream wrapper whose writes are paced so that the
//! connection never sends faster than `bytes_per_sec` on average.
//!
//! This kernel has no `netem`, so the benchmark's "remote link" lives in the server. Pacing
//! happens after each write: the bytes just written push the earliest time of the next write
//! forward by `n / rate`; the next `poll_write` waits for that moment (less `SLACK`). Writes are cut to
//! `MAX_WRITE` so the pace stays smooth (64 KiB at 100 MB/s is 0.65 ms). Every byte written is
//! also added to a shared counter, so the harness can report what crossed the "link".

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::stats::Stats;

/// Largest slice handed to the socket in one write, to keep the pacing smooth.
const MAX_WRITE: usize = 64 * 1024;

/// How far the pace may run ahead of or behind the cap (a burst of 0.5 MB at 100 MB/s).
const SLACK: Duration = Duration::from_millis(5);

/// A stream whose writes are paced to a byte rate and counted.
pub struct Throttled<S> {
    inner: S,
    /// Bytes per second; `None` leaves writes unpaced.
    rate: Option<f64>,
    /// When the link is free again after what was written so far.
    next_free: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    stats: Arc<Stats>,
}

impl<S> Throttled<S> {
    /// Wraps `inner`; `rate` in bytes per second (`None` = unlimited); every byte written is
    /// added to `stats.wire_bytes`.
    pub fn new(inner: S, rate: Option<f64>, stats: Arc<Stats>) -> Self {
        Throttled {
            inner,
            rate: rate.filter(|r| *r > 0.0),
            next_free: Instant::now(),
            sleep: None,
            stats,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Throttled<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Throttled<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Some(sleep) = this.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        let len = buf.len().min(MAX_WRITE);
        let n = match Pin::new(&mut this.inner).poll_write(cx, &buf[..len]) {
            Poll::Ready(Ok(n)) => n,
            other => return other,
        };
        this.stats.wire_bytes.fetch_add(n as u64, Ordering::Relaxed);
        if let Some(rate) = this.rate {
            // A token bucket of SLACK: time lost to timer granularity (tokio sleeps in whole
            // milliseconds) is made up by a short burst, so the average rate is the cap.
            let now = Instant::now();
            let start = this.next_free.max(now.checked_sub(SLACK).unwrap_or(now));
            this.next_free = start + Duration::from_secs_f64(n as f64 / rate);
            if this.next_free > now + SLACK {
                this.sleep = Some(Box::pin(tokio::time::sleep_until(this.next_free - SLACK)));
            }
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
