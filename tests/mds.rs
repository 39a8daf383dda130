//! Tests of the `mds` module and the `inspect`/`cat` commands against `fixtures/mds`.
