//! `mds`: parse MosaicML MDS `index.json` and shard bytes. Pure: bytes in, values out, no I/O.
//!
//! The pieces follow the path of a read: [`Index`] (which shard holds global sample `g`),
//! [`ShardHeader`] (where sample `i` lies in the shard), [`split_sample`] (where each column lies
//! in the sample), [`render`](mod@render) (the bytes of the column file a user reads). Shards stored
//! compressed go through [`decompress`] first, and [`verify_hashes`] checks what was fetched.
//! [`writer`] produces datasets exactly like the Python `MDSWriter`, for tests and examples.
//! Nothing here panics on bad input: every failure is an [`MdsError`] naming the file
//! (`index.json` or the shard basename) and the offset where that applies.

mod compression;
mod encoding;
mod error;
mod hash;
mod index;
mod le;
pub mod pyjson;
pub mod render;
mod sample;
mod shard;
pub mod writer;

pub use compression::{compress, decompress, MAX_RAW_SHARD};
pub use encoding::{Dtype, Encoding};
pub use error::{MdsError, Result};
pub use hash::{hash_hex, verify_hashes, HASH_ALGOS};
pub use index::{
    validate_basename, Algo, Column, Compression, FileRef, Index, ShardEntry, INDEX_FILE,
};
pub use render::{extension, render, render_range, rendered_len, renders_as_stored};
pub use sample::{column_len_from_sample_len, is_sole_variable_column, split_sample};
pub use shard::{header_len, ShardHeader, ShardView};
pub use writer::{Writer, WriterConfig};
