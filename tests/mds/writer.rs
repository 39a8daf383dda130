//! The writer against MDSWriter's own output: re-writing each fixture dataset's samples with
//! the same settings gives the same shards and index entries, byte for byte where the
//! compressor is deterministic.

use super::fixtures::{datasets, load_raw_shard};
use shardfs::mds::{Index, ShardView, Writer, WriterConfig};
use std::path::Path;

struct Outcome {
    index_equal: bool,
    zip_equal: bool,
}

/// Re-writes the dataset in `dir` (a plain, unmerged MDSWriter output) and compares.
fn rewrite(dir: &Path) -> Outcome {
    let index_bytes = std::fs::read(dir.join("index.json")).unwrap();
    let index = Index::parse(&index_bytes).unwrap();
    let first = &index.shards()[0];
    let mut w = Writer::new(WriterConfig {
        columns: first
            .columns
            .iter()
            .map(|c| (c.name.clone(), c.encoding.clone()))
            .collect(),
        compression: first.compression,
        hashes: first.hash_algos.clone(),
        size_limit: first.size_limit,
    })
    .unwrap();
    let mut originals = Vec::new();
    for entry in index.shards() {
        let raw = load_raw_shard(dir, entry);
        let view = ShardView::new(entry, &raw).unwrap();
        for i in 0..entry.samples {
            w.write(&view.columns(i).unwrap()).unwrap();
        }
        originals.push(raw);
    }
    let out = w.finish().unwrap();
    let name = dir.display();
    assert_eq!(out.raw_shards.len(), originals.len(), "{name}: shard count");
    for (k, (a, b)) in out.raw_shards.iter().zip(&originals).enumerate() {
        assert!(a == b, "{name}: raw shard {k} differs");
    }
    // Everything in the index but the compressed files' sizes and hashes must match.
    let mut ours: serde_json::Value = serde_json::from_slice(&out.index_json).unwrap();
    let mut theirs: serde_json::Value = serde_json::from_slice(&index_bytes).unwrap();
    let mut zip_equal = true;
    for (a, b) in ours["shards"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip(theirs["shards"].as_array_mut().unwrap())
    {
        assert_eq!(a["zip_data"]["basename"], b["zip_data"]["basename"]);
        zip_equal &= a["zip_data"] == b["zip_data"];
        a["zip_data"] = serde_json::Value::Null;
        b["zip_data"] = serde_json::Value::Null;
    }
    assert_eq!(ours, theirs, "{name}: index entries");
    Outcome {
        index_equal: out.index_json == index_bytes,
        zip_equal,
    }
}

#[test]
fn rewriting_fixtures_reproduces_them() {
    let mut report = Vec::new();
    for dir in datasets() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let dirs: Vec<_> = if name.starts_with("merged") {
            // Each subfolder is one MDSWriter's output with its own sorted index.json.
            (0..3).map(|k| dir.join(k.to_string())).collect()
        } else {
            vec![dir.clone()]
        };
        for d in dirs {
            let o = rewrite(&d);
            report.push(format!(
                "{}: index {} zip {}",
                d.display(),
                o.index_equal,
                o.zip_equal
            ));
            let compressed = name.starts_with("compressed") || name == "merged-compressed";
            if !compressed {
                assert!(o.index_equal, "{}: index.json bytes differ", d.display());
            }
            // zstd, bz2 and snappy encoders here produce the same bytes as the Python
            // libraries (brotli's Rust port and gzip's timestamp differ), so the whole index,
            // zip hashes included, must match.
            let same_encoder = [
                "compressed-zstd",
                "merged-compressed",
                "compressed-bz2",
                "compressed-snappy",
            ];
            if same_encoder.contains(&name.as_str()) {
                assert!(o.zip_equal && o.index_equal, "{}", d.display());
            }
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn empty_first_shard_like_upstream() {
    use shardfs::mds::writer::encode;
    let mut w = Writer::new(WriterConfig {
        columns: vec![
            ("x".into(), "bytes".parse().unwrap()),
            ("id".into(), "int".parse().unwrap()),
        ],
        compression: None,
        hashes: vec!["sha1".into()],
        size_limit: Some(300),
    })
    .unwrap();
    let names: Vec<_> = w.columns().iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, ["id", "x"]);
    w.write(&[&encode::int(0), &[7u8; 400]]).unwrap();
    w.write(&[&encode::int(1), b"a"]).unwrap();
    let out = w.finish().unwrap();
    assert_eq!(out.index.shard_samples(), vec![0, 1, 1]);
    assert_eq!(out.index.locate(0), Some((1, 0)));
}

mod round_trip {
    use proptest::prelude::*;
    use shardfs::mds::{self, ShardView, Writer, WriterConfig};

    const ENCODINGS: [&str; 6] = [
        "bytes",
        "str",
        "int",
        "uint16",
        "float64",
        "ndarray:uint8:3",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

        /// Whatever the writer writes, the reader reads back: same samples, same columns,
        /// shards never over the size limit unless a single sample is.
        #[test]
        fn writer_output_reads_back(
            kinds in proptest::collection::vec(0usize..ENCODINGS.len(), 1..5),
            samples in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..60),
            limit in prop_oneof![Just(None), (200u64..3000).prop_map(Some)],
            compression in prop_oneof![Just(None), Just(Some("zstd:3")), Just(Some("snappy")), Just(Some("gz"))],
        ) {
            let columns: Vec<(String, mds::Encoding)> = kinds
                .iter()
                .enumerate()
                .map(|(k, &e)| (format!("c{k}"), ENCODINGS[e].parse().unwrap()))
                .collect();
            let mut w = Writer::new(WriterConfig {
                columns,
                compression: compression.map(|c| c.parse().unwrap()),
                hashes: vec!["xxh64".into()],
                size_limit: limit,
            })
            .unwrap();
            let cols = w.columns().to_vec();
            // Each sample's value for column k: fixed-size columns take a prefix padded to size.
            let values: Vec<Vec<Vec<u8>>> = samples
                .iter()
                .map(|s| {
                    cols.iter()
                        .enumerate()
                        .map(|(k, c)| {
                            let mut v: Vec<u8> = s.iter().map(|b| b.wrapping_add(k as u8)).collect();
                            if let Some(size) = c.size {
                                v.resize(size as usize, 7);
                            }
                            v
                        })
                        .collect()
                })
                .collect();
            for v in &values {
                let refs: Vec<&[u8]> = v.iter().map(Vec::as_slice).collect();
                w.write(&refs).unwrap();
            }
            let out = w.finish().unwrap();
            let index = mds::Index::parse(&out.index_json).unwrap();
            prop_assert_eq!(index.num_samples(), values.len() as u64);
            let mut got = Vec::new();
            for (entry, file) in index.shards().iter().zip(&out.files) {
                prop_assert_eq!(&entry.stored_file().basename, &file.basename);
                mds::verify_hashes(entry.stored_file(), &file.data).unwrap();
                let raw = match &entry.compression {
                    Some(c) => mds::decompress(c, &file.data, Some(entry.raw.bytes)).unwrap(),
                    None => file.data.clone(),
                };
                if let Some(l) = limit {
                    prop_assert!(entry.samples <= 1 || entry.raw.bytes <= l);
                }
                let view = ShardView::new(entry, &raw).unwrap();
                for i in 0..entry.samples {
                    got.push(view.columns(i).unwrap().iter().map(|c| c.to_vec()).collect::<Vec<_>>());
                }
            }
            prop_assert_eq!(got, values);
        }
    }
}
