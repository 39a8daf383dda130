//! The one integration-test binary: each module below tests one area against real fixtures.

mod cache;
mod common;
mod csi;
mod docs;
mod kubernetes;
mod mds;
mod mount;
mod order;
mod pack;
mod store;
