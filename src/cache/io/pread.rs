//! The fallback reader: `pread(2)` on the calling thread.

use super::FileReader;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Reads with `pread(2)` on the calling thread.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PreadReader;

impl FileReader for PreadReader {
    fn name(&self) -> &'static str {
        "pread"
    }

    fn read_exact_at(&self, file: &Arc<File>, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        // Read into uninitialised capacity: zero-filling first would touch every byte twice.
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        let mut done = 0;
        while done < len {
            let at = offset
                .checked_add(done as u64)
                .and_then(|a| libc::off_t::try_from(a).ok())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
            // SAFETY: writes at most `len - done` bytes into the Vec's spare capacity, which
            // holds `len` bytes; the fd is kept open by `file`.
            let n = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    buf.as_mut_ptr().add(done).cast(),
                    len - done,
                    at,
                )
            };
            match n {
                n if n < 0 => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
                0 => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "file shorter than the requested range",
                    ))
                }
                n => done += n as usize,
            }
        }
        // SAFETY: the loop above initialised all `len` bytes.
        unsafe { buf.set_len(len) };
        Ok(buf)
    }
}
