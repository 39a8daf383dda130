//! Writes `examples/tiny/`, the small MDS dataset the README and tests use, with shardfs's
//! MDSWriter-compatible writer: 48 samples in a few shards, columns
//! `id:int`, `label:int8`, `text:str`, `image:jpeg` (16×16 baseline JPEGs of 2×2 colour
//! blocks, which PIL, TensorFlow and every other decoder read), `mask:png` (8×8 RGB gradients),
//! `vec:ndarray:float32:4`, `meta:json`. Deterministic: running it again gives the same bytes.
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

/// A valid baseline JPEG (JFIF, YCbCr, no subsampling) of `blocks` 8×8 blocks per side, each
/// block one flat colour: only DC coefficients are coded, with a quantisation table of ones, a
/// DC Huffman table of twelve 4-bit codes (one per size category) and an AC table holding only
/// end-of-block. The layout follows ITU-T T.81 (markers B.1, DC coding F.1.2.1) and JFIF 1.02.
fn jpeg(blocks: u16, colour: impl Fn(u16, u16) -> [u8; 3]) -> Vec<u8> {
    fn segment(out: &mut Vec<u8>, marker: u8, body: &[u8]) {
        out.extend_from_slice(&[0xFF, marker]);
        out.extend_from_slice(&(body.len() as u16 + 2).to_be_bytes());
        out.extend_from_slice(body);
    }
    let side = blocks * 8;
    let mut out = vec![0xFF, 0xD8];
    segment(&mut out, 0xE0, b"JFIF\0\x01\x02\0\0\x01\0\x01\0\0");
    let mut dqt = vec![0u8];
    dqt.extend_from_slice(&[1; 64]);
    segment(&mut out, 0xDB, &dqt);
    let mut sof = vec![8];
    sof.extend_from_slice(&side.to_be_bytes());
    sof.extend_from_slice(&side.to_be_bytes());
    sof.push(3);
    for id in 1..=3 {
        sof.extend_from_slice(&[id, 0x11, 0]);
    }
    segment(&mut out, 0xC0, &sof);
    // DC table 0: twelve codes of 4 bits for categories 0..=11; AC table 0: EOB as "0".
    let mut dht = vec![0x00, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    dht.extend(0..12u8);
    dht.extend_from_slice(&[0x10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00]);
    segment(&mut out, 0xC4, &dht);
    segment(&mut out, 0xDA, &[3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0]);
    let mut bits = BitWriter::default();
    let mut previous = [0i32; 3];
    for by in 0..blocks {
        for bx in 0..blocks {
            let [r, g, b] = colour(bx, by).map(f64::from);
            // JFIF's RGB to YCbCr, each component then level-shifted by 128.
            let ycc = [
                0.299 * r + 0.587 * g + 0.114 * b - 128.0,
                -0.168_736 * r - 0.331_264 * g + 0.5 * b,
                0.5 * r - 0.418_688 * g - 0.081_312 * b,
            ];
            for (c, v) in ycc.iter().enumerate() {
                // A flat block's DC coefficient is 8 x its (shifted) value.
                let dc = (v * 8.0).round() as i32;
                let diff = dc - previous[c];
                previous[c] = dc;
                let size = 32 - diff.unsigned_abs().leading_zeros();
                bits.put(size, 4);
                let magnitude = if diff < 0 {
                    diff + (1 << size) - 1
                } else {
                    diff
                };
                bits.put(magnitude as u32, size);
                bits.put(0, 1); // end of block: no AC coefficient
            }
        }
    }
    out.extend_from_slice(&bits.finish());
    out.extend_from_slice(&[0xFF, 0xD9]);
    out
}

/// Entropy-coded bits, most significant first, with 0xFF stuffing and 1-padding (T.81 F.1.2.3).
#[derive(Default)]
struct BitWriter {
    bytes: Vec<u8>,
    acc: u32,
    n: u32,
}

impl BitWriter {
    fn put(&mut self, value: u32, count: u32) {
        for i in (0..count).rev() {
            self.acc = (self.acc << 1) | ((value >> i) & 1);
            self.n += 1;
            if self.n == 8 {
                self.push();
            }
        }
    }

    fn push(&mut self) {
        let byte = self.acc as u8;
        self.bytes.push(byte);
        if byte == 0xFF {
            self.bytes.push(0);
        }
        self.acc = 0;
        self.n = 0;
    }

    fn finish(mut self) -> Vec<u8> {
        while self.n != 0 {
            self.put(1, 1);
        }
        self.bytes
    }
}

/// Builds the dataset in memory.
pub fn build() -> WrittenDataset {
    let cols = [
        ("id", "int"),
        ("label", "int8"),
        ("text", "str"),
        ("image", "jpeg"),
        ("mask", "png"),
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
        let mask = png(8, 8, |x, y| {
            [r ^ (x as u8 * 32), g ^ (y as u8 * 32), (x + y) as u8 * 16]
        });
        let image = jpeg(2, |x, y| {
            [
                r ^ (x as u8 * 128),
                g ^ (y as u8 * 128),
                (id as u8).wrapping_mul(5),
            ]
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
        // Values in the writer's column order (sorted by name): id, image, label, mask, meta,
        // text, vec.
        let values: [&[u8]; 7] = [
            &encode::int(id),
            &image,
            &label.to_le_bytes(),
            &mask,
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
