//! The loopback S3 server of the benchmarks (`bench-s3-server`, `bench/s3_server/main.rs`)
//! and the tests ([`FakeS3`] runs it in process): one implementation on the `s3s` crate of
//! the S3 operations and of the faults (by rule for the tests, at random for the soak).
//!
//! - [`fake`]: [`FakeS3`], the server on a thread of its own with buckets in memory;
//! - [`bucket`]: the S3 operations over buckets of files (a directory) or of bytes in memory;
//! - [`faults`]: faults at random (the soak) and by rule (the tests);
//! - [`serve`]: the accept loop, with SigV4 and the emulated link;
//! - [`stats`]: request and byte counters, in total and per key;
//! - [`throttle`]: the per-connection bandwidth cap.

pub mod bucket;
pub mod fake;
pub mod faults;
pub mod serve;
pub mod stats;
pub mod throttle;

pub use bucket::EtagMode;
pub use fake::{FakeS3, ACCESS_KEY, SECRET_KEY};
pub use faults::ServerFault;
pub use stats::Seen;
