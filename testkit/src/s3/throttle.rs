//! A per-connection bandwidth cap: a TCP stream wrapper that paces what the connection sends
//! and what it receives, each direction on its own, to `bytes_per_sec` on average (a link's
//! download and upload cost alike).
//!
//! This kernel has no `netem`, so the benchmark's "remote link" lives in the server. Pacing
//! happens after each transfer: the bytes just moved push the earliest time of the next one
//! forward by `n / rate`; the next `poll_write` (or `poll_read`) waits for that moment (less
//! `SLACK`). Writes and paced reads are cut to `MAX_IO` so the pace stays smooth (64 KiB at
//! 100 MB/s is 0.65 ms); when the server reads slower than a client sends, TCP's flow control
//! slows the client. Every byte
//! written or read is also added to a shared counter, so the harness can report what crossed
//! the "link".

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

/// Largest slice handed to or taken from the socket at once when paced, to keep the pace
/// smooth.
const MAX_IO: usize = 64 * 1024;

/// How far the pace may run ahead of or behind the cap (a burst of 0.5 MB at 100 MB/s).
const SLACK: Duration = Duration::from_millis(5);

/// One direction's pace: when the link is free again after what it moved so far.
struct Pace {
    /// Bytes per second; `None` leaves the direction unpaced.
    rate: Option<f64>,
    next_free: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Pace {
    fn new(rate: Option<f64>) -> Pace {
        Pace {
            rate: rate.filter(|r| *r > 0.0),
            next_free: Instant::now(),
            sleep: None,
        }
    }

    /// Ready once the link is free (a pending sleep has ended).
    fn poll_free(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(sleep) = self.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        Poll::Ready(())
    }

    /// `n` bytes just crossed: the link is busy for `n / rate` more.
    fn moved(&mut self, n: usize) {
        if let Some(rate) = self.rate {
            // A token bucket of SLACK: time lost to timer granularity (tokio sleeps in whole
            // milliseconds) is made up by a short burst, so the average rate is the cap.
            let now = Instant::now();
            let start = self.next_free.max(now.checked_sub(SLACK).unwrap_or(now));
            self.next_free = start + Duration::from_secs_f64(n as f64 / rate);
            if self.next_free > now + SLACK {
                self.sleep = Some(Box::pin(tokio::time::sleep_until(self.next_free - SLACK)));
            }
        }
    }
}

/// A stream whose writes and reads are paced to a byte rate and counted.
pub struct Throttled<S> {
    inner: S,
    send: Pace,
    receive: Pace,
    stats: Arc<Stats>,
}

impl<S> Throttled<S> {
    /// Wraps `inner`; `rate` in bytes per second each way (`None` = unlimited); every byte
    /// written is added to `stats.wire_bytes`, every byte read to `stats.wire_bytes_in`.
    pub fn new(inner: S, rate: Option<f64>, stats: Arc<Stats>) -> Self {
        Throttled {
            inner,
            send: Pace::new(rate),
            receive: Pace::new(rate),
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
        let this = &mut *self;
        if this.receive.poll_free(cx).is_pending() {
            return Poll::Pending;
        }
        if this.receive.rate.is_none() {
            let before = buf.filled().len();
            let r = Pin::new(&mut this.inner).poll_read(cx, buf);
            if let Poll::Ready(Ok(())) = r {
                let n = buf.filled().len() - before;
                this.stats
                    .wire_bytes_in
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            return r;
        }
        // Paced: at most MAX_IO at a time, as writes, so the last read of a request body
        // (not waited for) is small.
        let limit = buf.remaining().min(MAX_IO);
        let mut part = ReadBuf::new(buf.initialize_unfilled_to(limit));
        let r = Pin::new(&mut this.inner).poll_read(cx, &mut part);
        let n = part.filled().len();
        if let Poll::Ready(Ok(())) = r {
            buf.advance(n);
            this.stats
                .wire_bytes_in
                .fetch_add(n as u64, Ordering::Relaxed);
            this.receive.moved(n);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Throttled<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.send.poll_free(cx).is_pending() {
            return Poll::Pending;
        }
        let len = buf.len().min(MAX_IO);
        let n = match Pin::new(&mut this.inner).poll_write(cx, &buf[..len]) {
            Poll::Ready(Ok(n)) => n,
            other => return other,
        };
        this.stats.wire_bytes.fetch_add(n as u64, Ordering::Relaxed);
        this.send.moved(n);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
