//! A reader thread ahead of the shard builder: [`Prefetched`] runs a [`SampleSource`] on a
//! thread of its own and hands its samples over in order through a bounded queue, so reading
//! the input (waiting for the network, parsing a tar, reading image files) overlaps with
//! building shards on the caller's thread.
//!
//! Samples travel in batches of up to [`BATCH_SAMPLES`] samples or [`BATCH_BYTES`] bytes, at
//! most [`QUEUED`] batches waiting: a few MiB ahead of the builder whatever the input's size.
//! An error of the source comes after the samples read before it, as the source gave them.

use super::error::{PackError, Result};
use super::source::SampleSource;
use std::collections::VecDeque;
use std::sync::mpsc;

/// Samples in one batch, at most.
pub const BATCH_SAMPLES: usize = 256;
/// Bytes of sample values in one batch, about (a batch ends after the sample that passes it).
pub const BATCH_BYTES: usize = 4 << 20;
/// Batches read and not yet taken, at most.
pub const QUEUED: usize = 4;

/// What the reader thread sends: samples (each a buffer per column), the source's bytes
/// consumed after them, the error that stopped it, if any, and whether it is the last batch.
struct Batch {
    samples: Vec<Vec<Vec<u8>>>,
    consumed: u64,
    error: Option<PackError>,
    last: bool,
}

/// A source read on a thread of its own (see the module note).
pub struct Prefetched {
    rx: mpsc::Receiver<Batch>,
    current: VecDeque<Vec<Vec<u8>>>,
    error: Option<PackError>,
    consumed: u64,
    done: bool,
}

impl Prefetched {
    /// Starts reading `source` (which gives `columns` values per sample) on a new thread.
    pub fn start(mut source: Box<dyn SampleSource>, columns: usize) -> Result<Prefetched> {
        let (tx, rx) = mpsc::sync_channel::<Batch>(QUEUED);
        std::thread::Builder::new()
            .name("shardfs-pack-read".into())
            .spawn(move || {
                let mut batch = Vec::new();
                let mut bytes = 0usize;
                loop {
                    let mut values = vec![Vec::new(); columns];
                    let (more, error) = match source.next_sample(&mut values) {
                        Ok(more) => (more, None),
                        Err(e) => (false, Some(e)),
                    };
                    if more {
                        bytes += values.iter().map(Vec::len).sum::<usize>();
                        batch.push(values);
                    }
                    if !more || batch.len() >= BATCH_SAMPLES || bytes >= BATCH_BYTES {
                        let sent = Batch {
                            samples: std::mem::take(&mut batch),
                            consumed: source.consumed(),
                            error,
                            last: !more,
                        };
                        // A closed queue: the pack stopped; so does the reader.
                        if tx.send(sent).is_err() || !more {
                            return;
                        }
                        bytes = 0;
                    }
                }
            })
            .map_err(|e| {
                PackError::Internal(format!("cannot start the input reader thread: {e}"))
            })?;
        Ok(Prefetched {
            rx,
            current: VecDeque::new(),
            error: None,
            consumed: 0,
            done: false,
        })
    }
}

impl SampleSource for Prefetched {
    fn next_sample(&mut self, out: &mut [Vec<u8>]) -> Result<bool> {
        loop {
            if let Some(mut sample) = self.current.pop_front() {
                for (o, v) in out.iter_mut().zip(sample.iter_mut()) {
                    std::mem::swap(o, v);
                }
                return Ok(true);
            }
            if let Some(e) = self.error.take() {
                self.done = true;
                return Err(e);
            }
            if self.done {
                return Ok(false);
            }
            match self.rx.recv() {
                Ok(b) => {
                    self.current = b.samples.into();
                    self.consumed = b.consumed;
                    self.error = b.error;
                    self.done = b.last;
                }
                // The reader ended without its last batch: it panicked.
                Err(_) => {
                    self.done = true;
                    return Err(PackError::Internal(
                        "the input reader thread stopped".into(),
                    ));
                }
            }
        }
    }

    fn consumed(&self) -> u64 {
        self.consumed
    }
}
