//! Tests of the `mds` module and the `inspect`/`cat` commands against `fixtures/mds`
//! (datasets written by mosaicml-streaming 0.13) and against malformed input.

mod bad_input;
mod check;
mod cli;
mod fixtures;
mod malformed;
mod numpy_floats;
mod tiny;
mod writer;
