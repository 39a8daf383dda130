//! Malformed input never panics: each case gives a typed error that names the file and,
//! where it applies, the offset. A proptest feeds random and mutated bytes to every parser.

use crate::common::fixtures;
use proptest::prelude::*;
use shardfs::mds::{self, Index, MdsError, ShardHeader, ShardView};

fn basic() -> (Index, Vec<u8>) {
    let dir = fixtures().join("mds/basic");
    let index = Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let shard = std::fs::read(dir.join(&index.shards()[0].raw.basename)).unwrap();
    (index, shard)
}

fn index_text() -> String {
    std::fs::read_to_string(fixtures().join("mds/basic/index.json")).unwrap()
}

#[test]
fn truncated_shard_names_file_and_offset() {
    let (index, shard) = basic();
    let entry = &index.shards()[0];
    for cut in [0, 3, 10, 100, shard.len() - 1] {
        let err = ShardView::new(entry, &shard[..cut]).unwrap_err();
        assert_eq!(err.file(), Some("shard.00000.mds"), "{err}");
        assert!(err.to_string().contains("offset"), "{err}");
    }
}

#[test]
fn offsets_past_end_or_decreasing() {
    let (index, shard) = basic();
    let entry = &index.shards()[0];
    let mut past = shard.clone();
    let n = entry.samples as usize;
    let last = 4 + 4 * n;
    past[last..last + 4].copy_from_slice(&(shard.len() as u32 + 10).to_le_bytes());
    let err = ShardView::new(entry, &past).unwrap_err();
    assert!(matches!(err.kind(), MdsError::Corrupt { .. }), "{err}");
    assert_eq!(err.file(), Some("shard.00000.mds"));

    let mut dec = shard.clone();
    dec[8..12].copy_from_slice(&1u32.to_le_bytes());
    let err = ShardView::new(entry, &dec).unwrap_err();
    assert!(
        matches!(err.kind(), MdsError::Corrupt { offset: 8, .. }),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("shard.00000.mds: offset 8:"),
        "{err}"
    );
}

#[test]
fn huge_sample_count_does_not_allocate() {
    let mut bytes = u32::MAX.to_le_bytes().to_vec();
    bytes.extend([0u8; 64]);
    let err = ShardHeader::parse(&bytes).unwrap_err();
    assert!(matches!(err, MdsError::Truncated { .. }), "{err}");
    let (index, shard) = basic();
    let mut lie = shard.clone();
    lie[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(ShardView::new(&index.shards()[0], &lie).is_err());
}

#[test]
fn column_length_past_sample_end() {
    let (index, shard) = basic();
    let entry = &index.shards()[0];
    let header = ShardHeader::parse(&shard).unwrap();
    let r = header.sample_range(0).unwrap();
    let mut bad = shard.clone();
    // The first variable column's u32 length sits at the start of the sample; its bytes
    // start after the two lengths (blob and text are variable).
    bad[r.start as usize..r.start as usize + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let view = ShardView::new(entry, &bad).unwrap();
    let err = view.columns(0).unwrap_err();
    assert_eq!(err.file(), Some("shard.00000.mds"));
    assert!(
        err.to_string().contains(&format!("offset {}", r.start + 8)),
        "{err}"
    );
}

#[test]
fn bad_utf8_in_str_column() {
    let enc: mds::Encoding = "str".parse().unwrap();
    let err = mds::render(&enc, b"ok\xff").unwrap_err();
    assert!(matches!(err, MdsError::Render { .. }), "{err}");
    assert!(err.to_string().contains("offset 2"), "{err}");
    assert!(mds::rendered_len(&enc, b"ok\xff").is_err());
}

/// Says whether an error is of the expected kind.
type KindCheck = fn(&MdsError) -> bool;

#[test]
fn invalid_json_wrong_version_unknown_encoding() {
    let text = index_text();
    let cases: Vec<(String, KindCheck)> = vec![
        (text[..text.len() / 2].to_string(), |e| {
            matches!(e, MdsError::Json(_))
        }),
        (
            "[]".into(),
            |e| matches!(e, MdsError::Index(m) if m.contains("not a JSON object")),
        ),
        (text.replacen("\"version\": 2", "\"version\": 1", 1), |e| {
            matches!(e, MdsError::Version { .. })
        }),
        (
            text.replace("\"version\": 2}", "\"version\": \"2\"}"),
            |e| matches!(e, MdsError::Version { .. }),
        ),
        (
            text.replacen("\"bytes\", ", "\"bfloat16\", ", 1),
            |e| matches!(e, MdsError::Index(m) if m.contains("bfloat16")),
        ),
        (
            text.replacen("\"format\": \"mds\"", "\"format\": \"tsv\"", 1),
            |e| matches!(e, MdsError::UnsupportedFormat { format, .. } if format == "tsv"),
        ),
        (text.replacen("\"samples\": ", "\"samples\": -", 1), |e| {
            matches!(e, MdsError::Index(_))
        }),
        (
            text.replacen("\"shard.00000.mds\"", "\"../shard.00000.mds\"", 1),
            |e| matches!(e, MdsError::BadBasename { .. }),
        ),
        (
            text.replacen("\"shard.00000.mds\"", "\"/tmp/shard.00000.mds\"", 1),
            |e| matches!(e, MdsError::BadBasename { .. }),
        ),
        (
            text.replacen("\"compression\": null", "\"compression\": \"lz4\"", 1),
            |e| matches!(e, MdsError::Index(m) if m.contains("lz4")),
        ),
    ];
    for (i, (input, is_kind)) in cases.into_iter().enumerate() {
        assert_ne!(input, text, "case {i} did not change the index");
        let err = Index::parse(input.as_bytes()).unwrap_err();
        assert_eq!(err.file(), Some("index.json"), "case {i}: {err}");
        assert!(is_kind(err.kind()), "case {i}: {err}");
    }
}

#[test]
fn hash_mismatch_names_file_and_algorithm() {
    let (index, mut shard) = basic();
    let entry = &index.shards()[0];
    mds::verify_hashes(&entry.raw, &shard).unwrap();
    let last = shard.len() - 1;
    shard[last] ^= 1;
    let err = mds::verify_hashes(&entry.raw, &shard).unwrap_err();
    assert_eq!(err.file(), Some("shard.00000.mds"));
    assert!(matches!(err.kind(), MdsError::HashMismatch { .. }), "{err}");
    let err = mds::verify_hashes(&entry.raw, &shard[..10]).unwrap_err();
    assert!(matches!(err.kind(), MdsError::SizeMismatch { .. }), "{err}");
}

#[test]
fn decompression_bomb_is_bounded() {
    let c: mds::Compression = "zstd".parse().unwrap();
    let zeros = vec![0u8; 8 << 20];
    let small = mds::compress(&c, &zeros).unwrap();
    assert!(small.len() < 4096);
    let err = mds::decompress(&c, &small, Some(1 << 20)).unwrap_err();
    assert!(matches!(err, MdsError::Decompress { .. }), "{err}");
}

fn all_encodings() -> Vec<mds::Encoding> {
    [
        "bytes",
        "str",
        "int",
        "uint8",
        "int16",
        "float16",
        "float32",
        "float64",
        "uint64",
        "str_int",
        "str_float",
        "str_decimal",
        "pil",
        "jpeg",
        "png",
        "pkl",
        "json",
        "jpeg_array",
        "jpegarray",
        "list[pil]",
        "list[jpeg]",
        "list[png]",
        "ndarray",
        "ndarray:float32",
        "ndarray:uint8:2,3",
    ]
    .iter()
    .map(|e| e.parse().unwrap())
    .collect()
}

fn mutate(base: &[u8], edits: &[(usize, u8)], cut: usize) -> Vec<u8> {
    let mut v = base.to_vec();
    for &(pos, byte) in edits {
        if !v.is_empty() {
            let i = pos % v.len();
            v[i] = byte;
        }
    }
    v.truncate(cut.min(v.len()).max(v.len().saturating_sub(cut % 64)));
    v
}

/// Runs every parser on `bytes`; the property is simply that none of them panics.
fn exercise(index: &Index, bytes: &[u8]) {
    let _ = Index::parse(bytes);
    let _ = ShardHeader::parse(bytes);
    for entry in index.shards().iter().take(1) {
        if let Ok(view) = ShardView::new(entry, bytes) {
            for i in 0..entry.samples.min(4) {
                let _ = view.columns(i);
            }
        }
        let _ = mds::split_sample(&entry.columns, bytes);
    }
    for enc in all_encodings() {
        let r = mds::render(&enc, bytes);
        let l = mds::rendered_len(&enc, bytes);
        let whole = mds::render_range(&enc, &bytes::Bytes::copy_from_slice(bytes), 0, usize::MAX);
        assert_eq!(
            r.as_ref().ok().map(|r| r.to_vec()),
            whole.ok().map(|w| w.to_vec())
        );
        assert_eq!(
            r.as_ref().ok().map(|r| r.len() as u64),
            l.as_ref().ok().copied()
        );
    }
    for c in ["zstd", "gz", "bz2", "br", "snappy"] {
        let _ = mds::decompress(&c.parse().unwrap(), bytes, Some(1 << 16));
    }
}

fn cases() -> u32 {
    std::env::var("SHARDFS_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let (index, _) = basic();
        exercise(&index, &bytes);
    }

    #[test]
    fn mutated_fixtures_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in any::<usize>(),
        which in 0usize..3,
    ) {
        let (index, shard) = basic();
        let text = index_text();
        let enc = std::fs::read(fixtures().join("mds/encodings/shard.00000.mds")).unwrap();
        let base: &[u8] = match which { 0 => &shard, 1 => text.as_bytes(), _ => &enc[..4096] };
        let bytes = mutate(base, &edits, cut);
        exercise(&index, &bytes);
    }
}
