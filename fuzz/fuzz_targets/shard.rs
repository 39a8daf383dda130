//! Fuzz shard parsing: the header, sample ranges, column split and rendering of every column
//! for a fixed set of column layouts, and whole-shard decompression. Never a panic, and
//! `rendered_len` always agrees with `render`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardfs::mds::{self, Column, Encoding, ShardHeader};

const LAYOUTS: &[&[&str]] = &[
    &["bytes", "int", "str"],
    &["float16", "float32", "float64", "uint64", "str_int"],
    &["ndarray", "ndarray:float32", "ndarray:uint8:2,3", "pil"],
    &["jpeg_array", "list[pil]", "list[png]", "json"],
];

fn columns(layout: &[&str]) -> Vec<Column> {
    layout
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let encoding: Encoding = e.parse().unwrap();
            Column {
                name: format!("c{k}"),
                size: encoding.fixed_size().map(|s| s as u32),
                encoding,
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let cols = columns(LAYOUTS[selector as usize % LAYOUTS.len()]);
    if let Ok(header) = ShardHeader::parse(rest) {
        for i in 0..header.num_samples().min(16) {
            let r = header.sample_range(i).unwrap();
            let (Ok(b), Ok(e)) = (usize::try_from(r.start), usize::try_from(r.end)) else {
                continue;
            };
            let Some(sample) = rest.get(b..e) else {
                continue;
            };
            if let Ok(ranges) = mds::split_sample(&cols, sample) {
                for (c, r) in cols.iter().zip(ranges) {
                    let raw = &sample[r];
                    let len = mds::rendered_len(&c.encoding, raw).ok();
                    let out = mds::render(&c.encoding, raw).ok().map(|o| o.len() as u64);
                    assert_eq!(len, out);
                }
            }
        }
    }
    for c in ["zstd", "gz", "bz2", "br", "snappy"] {
        let _ = mds::decompress(&c.parse().unwrap(), rest, Some(1 << 20));
    }
});
