//! The fallback reader: `pread(2)` through `std::os::unix::fs::FileExt`.

use super::FileReader;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Reads with `pread(2)` on the calling thread.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PreadReader;

impl FileReader for PreadReader {
    fn name(&self) -> &'static str {
        "pread"
    }

    fn read_exact_at(&self, file: &Arc<File>, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
}
