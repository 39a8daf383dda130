//! Accepting any `:authority` on the plugin's unix socket.
//!
//! On a unix socket `:authority` names nothing. Go's gRPC (kubelet's) sends `localhost`, but
//! Python's (grpc-core) derives it from the socket path (`tmp%2Fcsi%2Fcsi.sock`), which is not a
//! valid URI authority; the HTTP/2 layer under tonic (`h2`) then resets every stream with
//! PROTOCOL_ERROR before any service sees it, and offers no setting to relax the check. So each
//! connection's incoming bytes pass through [`Rewriter`], which replaces the value of every
//! `:authority` header field (named by the HPACK static entry 1, RFC 7541 §6.2 and appendix A,
//! or written out uncompressed, as grpc-core does) with a prefix of `localhost`, leaving
//! everything else byte for byte.
//!
//! The HPACK dynamic table stays in step: the replacement is never longer than the value it
//! replaces (for a Huffman-coded value, never longer than the shortest value its bytes can
//! decode to, 30 bits per character at most), so the server's copy of the table holds every
//! entry the client's does, at the same index, and only ever evicts later. A header block that
//! does not parse is passed on unchanged, for `h2` to reject as before.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADERS: u8 = 0x1;
const FRAME_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// The largest frame payload the server accepts unless it says otherwise (RFC 9113 §6.5.2),
/// which tonic's server does not.
const MAX_FRAME: usize = 16_384;
/// What a rewritten `:authority` says (a prefix of it where the value was shorter).
const REPLACEMENT: &[u8] = b"localhost";

/// A header block being collected from HEADERS and CONTINUATION frames.
struct Block {
    stream: [u8; 4],
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

/// Rewrites the `:authority` of the header blocks in a client's byte stream.
#[derive(Default)]
pub struct Rewriter {
    preface_seen: usize,
    pending: Vec<u8>,
    block: Option<Block>,
}

impl Rewriter {
    /// Takes the next bytes the client sent; appends to `out` what the server should read.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        if self.preface_seen < PREFACE.len() {
            let n = input.len().min(PREFACE.len() - self.preface_seen);
            out.extend_from_slice(&input[..n]);
            self.preface_seen += n;
            input = &input[n..];
        }
        self.pending.extend_from_slice(input);
        let mut at = 0;
        while let Some(header) = self.pending.get(at..at + 9) {
            let len = (usize::from(header[0]) << 16)
                | (usize::from(header[1]) << 8)
                | usize::from(header[2]);
            let Some(payload) = self.pending.get(at + 9..at + 9 + len) else {
                break;
            };
            let (kind, flags) = (header[3], header[4]);
            let stream = [header[5], header[6], header[7], header[8]];
            let continues = self.block.as_ref().is_some_and(|b| b.stream == stream);
            match kind {
                FRAME_HEADERS if self.block.is_none() => {
                    if let Some(block) = headers_block(flags, stream, payload) {
                        self.block = Some(block);
                    } else {
                        out.extend_from_slice(&self.pending[at..at + 9 + len]);
                    }
                }
                FRAME_CONTINUATION if continues => {
                    if let Some(b) = self.block.as_mut() {
                        b.fragment.extend_from_slice(payload);
                    }
                }
                _ => {
                    // Anything else in the middle of a header block is the client's protocol
                    // error: pass what was held and this frame on, for h2 to answer.
                    if let Some(b) = self.block.take() {
                        write_block(&b, b.fragment.clone(), out);
                    }
                    out.extend_from_slice(&self.pending[at..at + 9 + len]);
                }
            }
            let ends_block =
                matches!(kind, FRAME_HEADERS | FRAME_CONTINUATION) && flags & FLAG_END_HEADERS != 0;
            if ends_block {
                if let Some(b) = self.block.take() {
                    let fragment =
                        rewrite_authority(&b.fragment).unwrap_or_else(|| b.fragment.clone());
                    write_block(&b, fragment, out);
                }
            }
            at += 9 + len;
        }
        self.pending.drain(..at);
    }
}

/// The block a HEADERS frame starts (padding dropped), or None when the frame is malformed.
fn headers_block(flags: u8, stream: [u8; 4], payload: &[u8]) -> Option<Block> {
    let mut p = payload;
    if flags & FLAG_PADDED != 0 {
        let (&pad, rest) = p.split_first()?;
        p = rest.get(..rest.len().checked_sub(usize::from(pad))?)?;
    }
    let priority = if flags & FLAG_PRIORITY != 0 {
        let bytes: [u8; 5] = p.get(..5)?.try_into().ok()?;
        p = &p[5..];
        Some(bytes)
    } else {
        None
    };
    Some(Block {
        stream,
        end_stream: flags & FLAG_END_STREAM != 0,
        priority,
        fragment: p.to_vec(),
    })
}

/// Writes a header block as one HEADERS frame and as many CONTINUATION frames as it needs.
fn write_block(b: &Block, fragment: Vec<u8>, out: &mut Vec<u8>) {
    let mut first = Vec::with_capacity(5 + fragment.len().min(MAX_FRAME));
    let mut flags = 0;
    if b.end_stream {
        flags |= FLAG_END_STREAM;
    }
    if let Some(p) = b.priority {
        flags |= FLAG_PRIORITY;
        first.extend_from_slice(&p);
    }
    let room = MAX_FRAME - first.len();
    let (head, mut rest) = fragment.split_at(fragment.len().min(room));
    first.extend_from_slice(head);
    let mut frames = vec![(FRAME_HEADERS, flags, first)];
    while !rest.is_empty() {
        let (chunk, r) = rest.split_at(rest.len().min(MAX_FRAME));
        frames.push((FRAME_CONTINUATION, 0, chunk.to_vec()));
        rest = r;
    }
    let last = frames.len() - 1;
    for (i, (kind, mut flags, payload)) in frames.into_iter().enumerate() {
        if i == last {
            flags |= FLAG_END_HEADERS;
        }
        let len = payload.len() as u32;
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&b.stream);
        out.extend_from_slice(&payload);
    }
}

/// An HPACK integer with an `prefix`-bit prefix at `b[i]` (RFC 7541 §5.1): (value, next index).
fn integer(b: &[u8], i: usize, prefix: u32) -> Option<(usize, usize)> {
    let mask = (1usize << prefix) - 1;
    let mut value = usize::from(*b.get(i)?) & mask;
    let mut j = i + 1;
    if value < mask {
        return Some((value, j));
    }
    let mut shift = 0;
    loop {
        let c = *b.get(j)?;
        j += 1;
        value = value.checked_add(usize::from(c & 0x7f).checked_shl(shift)?)?;
        shift += 7;
        if c & 0x80 == 0 || shift > 28 {
            return (c & 0x80 == 0).then_some((value, j));
        }
    }
}

/// An HPACK string literal at `b[i]` (RFC 7541 §5.2): (where it ends, the shortest length its
/// value can have once decoded).
fn string(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let huffman = *b.get(i)? & 0x80 != 0;
    let (len, start) = integer(b, i, 7)?;
    let end = start.checked_add(len).filter(|&e| e <= b.len())?;
    // Huffman codes are 5 to 30 bits, with at most 7 bits of padding.
    let shortest = if huffman {
        (len * 8).saturating_sub(7).div_ceil(30)
    } else {
        len
    };
    Some((end, shortest))
}

/// The header block with every `:authority` value (static name index 1) replaced, or None when
/// it does not parse.
pub fn rewrite_authority(b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let first = b[i];
        let prefix = if first & 0x80 != 0 {
            // Indexed field.
            let (_, next) = integer(b, i, 7)?;
            out.extend_from_slice(&b[i..next]);
            i = next;
            continue;
        } else if first & 0xc0 == 0x40 {
            6 // literal with incremental indexing
        } else if first & 0xe0 == 0x20 {
            // Dynamic table size update.
            let (_, next) = integer(b, i, 5)?;
            out.extend_from_slice(&b[i..next]);
            i = next;
            continue;
        } else {
            4 // literal without indexing, or never indexed
        };
        let (name, mut at) = integer(b, i, prefix)?;
        let mut is_authority = name == 1;
        if name == 0 {
            // A name written out (grpc-core writes `:authority` so, uncompressed).
            let (name_end, _) = string(b, at)?;
            // Its length byte (10, not Huffman-coded) and the name.
            is_authority = b.get(at..name_end) == Some(&b"\x0a:authority"[..]);
            at = name_end;
        }
        let (end, shortest) = string(b, at)?;
        if is_authority && shortest > 0 {
            let value = &REPLACEMENT[..shortest.min(REPLACEMENT.len())];
            out.extend_from_slice(&b[i..at]);
            out.push(value.len() as u8);
            out.extend_from_slice(value);
        } else {
            out.extend_from_slice(&b[i..end]);
        }
        i = end;
    }
    Some(out)
}

/// A connection whose incoming bytes pass through a [`Rewriter`].
pub struct AuthorityFix<S> {
    inner: S,
    rewriter: Rewriter,
    ready: Vec<u8>,
    read_at: usize,
}

impl<S> AuthorityFix<S> {
    /// Wraps a freshly accepted connection.
    pub fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            rewriter: Rewriter::default(),
            ready: Vec::new(),
            read_at: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.read_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.read_at);
                buf.put_slice(&this.ready[this.read_at..this.read_at + n]);
                this.read_at += n;
                return Poll::Ready(Ok(()));
            }
            this.ready.clear();
            this.read_at = 0;
            let mut raw = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut raw);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if rb.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => this.rewriter.feed(rb.filled(), &mut this.ready),
                other => return other,
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for AuthorityFix<tokio::net::UnixStream> {
    type ConnectInfo = <tokio::net::UnixStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_values_are_replaced_and_the_rest_kept() {
        // :method GET (indexed 2), :authority "tmp%2Fs" with incremental indexing (raw),
        // a literal new name "x" = "y" without indexing, then :authority Huffman-coded (len 3).
        let block = [
            0x82, 0x41, 7, b't', b'm', b'p', b'%', b'2', b'F', b's', 0x00, 1, b'x', 1, b'y', 0x01,
            0x83, 1, 2, 3,
        ];
        let got = rewrite_authority(&block).unwrap();
        let want = [
            0x82, 0x41, 7, b'l', b'o', b'c', b'a', b'l', b'h', b'o', 0x00, 1, b'x', 1, b'y', 0x01,
            1, b'l',
        ];
        assert_eq!(got, want);
        assert_eq!(rewrite_authority(&[0x41, 9]), None);
        // grpc-core: literal with incremental indexing, new name ":authority", raw value.
        let mut block = vec![0x40, 10];
        block.extend_from_slice(b":authority");
        block.extend_from_slice(&[5, b'a', b'%', b'2', b'F', b'b', 0x83]);
        let mut want = vec![0x40, 10];
        want.extend_from_slice(b":authority");
        want.extend_from_slice(&[5, b'l', b'o', b'c', b'a', b'l', 0x83]);
        assert_eq!(rewrite_authority(&block).unwrap(), want);
    }

    #[test]
    fn frames_split_across_reads_and_continuations_come_out_whole() {
        let mut client = PREFACE.to_vec();
        // SETTINGS (empty), then HEADERS without END_HEADERS + CONTINUATION.
        client.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
        client.extend_from_slice(&[0, 0, 3, FRAME_HEADERS, FLAG_END_STREAM, 0, 0, 0, 1]);
        client.extend_from_slice(&[0x82, 0x41, 4]);
        client.extend_from_slice(&[0, 0, 4, FRAME_CONTINUATION, FLAG_END_HEADERS, 0, 0, 0, 1]);
        client.extend_from_slice(b"a/bc");
        let mut r = Rewriter::default();
        let mut out = Vec::new();
        for byte in &client {
            r.feed(std::slice::from_ref(byte), &mut out);
        }
        let mut want = PREFACE.to_vec();
        want.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[
            0,
            0,
            7,
            FRAME_HEADERS,
            FLAG_END_STREAM | FLAG_END_HEADERS,
            0,
            0,
            0,
            1,
        ]);
        want.extend_from_slice(&[0x82, 0x41, 4, b'l', b'o', b'c', b'a']);
        assert_eq!(out, want);
    }
}
