//! Writes `examples/tiny/`, the small MDS dataset the README and tests use, with shardfs's
//! MDSWriter-compatible writer: 48 samples in a few shards, columns
//! `id:int`, `label:int8`, `text:str`, `image:png` (8×8 RGB gradients), `vec:ndarray:float32:4`,
//! `meta:json`. Deterministic: running it again gives the same bytes.
//!
//! Run: `cargo run --example make_tiny [OUT_DIR]` (default `examples/tiny`).

use shardfs::mds::writer::{encode, WrittenDataset};
use shardfs::mds::{Dtype, Writer, WriterConfig};

/// Samples in the dataset.
pub const SAMPLES: i64 = 48;

const WORDS: [&str; 12] = [
    "river", "stone", "cloud", "ember", "maple", "orbit", "pixel", "quartz", "shard", "tide",
    "willow", "zephyr",
];

/// A tiny linear congruential generator, so the data is varied but reproducible.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// A valid 8-bit RGB PNG of `w`×`h` pixels (no filtering, zlib-compressed IDAT).
fn png(w: u32, h: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
    use std::io::Write;
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.sum().to_be_bytes());
    }
    let mut raw = Vec::new();
    for y in 0..h {
        raw.push(0); // filter type None
        for x in 0..w {
            raw.extend_from_slice(&pixel(x, y));
        }
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&raw).expect("in-memory write");
    let idat = z.finish().expect("in-memory write");
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &idat);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// Builds the dataset in memory.
pub fn build() -> WrittenDataset {
    let cols = [
        ("id", "int"),
        ("label", "int8"),
        ("text", "str"),
        ("image", "png"),
        ("vec", "ndarray:float32:4"),
        ("meta", "json"),
    ];
    let mut w = Writer::new(WriterConfig {
        columns: cols
            .iter()
            .map(|(n, e)| (n.to_string(), e.parse().expect("known encoding")))
            .collect(),
        compression: None,
        hashes: vec!["sha1".into(), "xxh64".into()],
        size_limit: Some(8192),
    })
    .expect("valid config");
    let vec_enc = "ndarray:float32:4".parse().expect("known encoding");
    let mut rng = Lcg(9176);
    for id in 0..SAMPLES {
        let label = (id % 5) as i8 - 2;
        let n_words = 3 + rng.next() % 6;
        let text: Vec<&str> = (0..n_words)
            .map(|_| WORDS[(rng.next() % WORDS.len() as u64) as usize])
            .collect();
        let text = format!("{} #{id}", text.join(" "));
        let (r, g) = ((rng.next() % 256) as u8, (rng.next() % 256) as u8);
        let image = png(8, 8, |x, y| {
            [r ^ (x as u8 * 32), g ^ (y as u8 * 32), (x + y) as u8 * 16]
        });
        let floats = [
            id as f32,
            id as f32 / 8.0,
            -(label as f32),
            (rng.next() % 1000) as f32 / 100.0,
        ];
        let data: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
        let vec = encode::ndarray(&vec_enc, Dtype::F32, &[4], &data).expect("fits the encoding");
        let meta = format!(
            "{{\"id\": {id}, \"words\": {n_words}, \"even\": {}}}",
            id % 2 == 0
        );
        // Values in the writer's column order (sorted by name): id, image, label, meta, text, vec.
        let values: [&[u8]; 6] = [
            &encode::int(id),
            &image,
            &label.to_le_bytes(),
            meta.as_bytes(),
            text.as_bytes(),
            &vec,
        ];
        w.write(&values).expect("valid sample");
    }
    w.finish().expect("dataset fits")
}

#[allow(dead_code)]
fn main() -> std::io::Result<()> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/tiny".into());
    let out = std::path::Path::new(&out);
    std::fs::create_dir_all(out)?;
    let ds = build();
    for f in &ds.files {
        std::fs::write(out.join(&f.basename), &f.data)?;
    }
    std::fs::write(out.join("index.json"), &ds.index_json)?;
    println!(
        "wrote {} samples in {} shards to {}",
        ds.index.num_samples(),
        ds.files.len(),
        out.display()
    );
    Ok(())
}
