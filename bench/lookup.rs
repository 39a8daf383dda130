//! Micro-benchmark of the per-read work of `mds`: find sample `i` in a 64 MiB shard (header
//! look-up), then split it into column byte ranges, in random order. Reported in ns per sample
//! and as a ratio to a baseline measured in the same run: copying the same sample's bytes
//! (what any read of it costs at least).
//!
//! Run: `cargo bench --bench lookup` (release build; not part of `cargo test`).

use shardfs::mds::writer::encode;
use shardfs::mds::{self, Dtype, ShardHeader, Writer, WriterConfig};
use std::hint::black_box;
use std::time::Instant;

const SHARD_BYTES: u64 = 64 << 20;

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

fn build_shard() -> (Vec<u8>, Vec<mds::Column>) {
    let cols = [
        ("id", "int"),
        ("label", "int8"),
        ("text", "str"),
        ("image", "jpeg"),
        ("vec", "ndarray:float32:16"),
        ("extra", "ndarray"),
    ];
    let mut w = Writer::new(WriterConfig {
        columns: cols
            .iter()
            .map(|(n, e)| (n.to_string(), e.parse().unwrap()))
            .collect(),
        compression: None,
        hashes: vec![],
        size_limit: Some(SHARD_BYTES),
    })
    .unwrap();
    let vec_enc = "ndarray:float32:16".parse().unwrap();
    let dyn_enc = "ndarray".parse().unwrap();
    let mut rng = Lcg(1);
    let mut id = 0i64;
    // Fill exactly one shard: stop before the writer would cut a second one.
    let mut size = 0u64;
    loop {
        let text = "x".repeat(100 + (rng.next() % 400) as usize);
        let image = vec![0xAB; 2000 + (rng.next() % 4000) as usize];
        let vec = encode::ndarray(&vec_enc, Dtype::F32, &[16], &[0u8; 64]).unwrap();
        let extra = encode::ndarray(&dyn_enc, Dtype::U16, &[3, 5], &[1u8; 30]).unwrap();
        let values: [&[u8]; 6] = [
            &extra,
            &encode::int(id),
            &image,
            &[1u8],
            text.as_bytes(),
            &vec,
        ];
        let sample_len: u64 = values.iter().map(|v| v.len() as u64).sum::<u64>() + 4 * 4 + 4;
        if size + sample_len + 4096 > SHARD_BYTES {
            break;
        }
        size += sample_len;
        w.write(&values).unwrap();
        id += 1;
    }
    let ds = w.finish().unwrap();
    assert_eq!(ds.raw_shards.len(), 1);
    let columns = ds.index.shards()[0].columns.clone();
    (ds.raw_shards.into_iter().next().unwrap(), columns)
}

fn main() {
    let (shard, columns) = build_shard();
    let t = Instant::now();
    let reps = 20;
    for _ in 0..reps {
        black_box(ShardHeader::parse(black_box(&shard)).unwrap());
    }
    let parse_ns = t.elapsed().as_nanos() as f64 / reps as f64;
    let header = ShardHeader::parse(&shard).unwrap();
    let n = header.num_samples();
    let lookups = 2_000_000u64;
    let mut rng = Lcg(42);
    let order: Vec<u32> = (0..lookups)
        .map(|_| (rng.next() % u64::from(n)) as u32)
        .collect();

    // Baseline: copy each sample's bytes (ranges taken from a precomputed table).
    let ranges: Vec<(usize, usize)> = (0..n)
        .map(|i| {
            let r = header.sample_range(i).unwrap();
            (r.start as usize, r.end as usize)
        })
        .collect();
    let mut buf = Vec::with_capacity(1 << 16);
    let t = Instant::now();
    for &i in &order {
        let (b, e) = ranges[i as usize];
        buf.clear();
        buf.extend_from_slice(&shard[b..e]);
        black_box(&buf);
    }
    let copy_ns = t.elapsed().as_nanos() as f64 / lookups as f64;

    // Measured: header look-up + column split, giving the `text` column's bytes.
    let text_col = columns.iter().position(|c| c.name == "text").unwrap();
    let t = Instant::now();
    let mut total = 0usize;
    for &i in &order {
        let r = header.sample_range(black_box(i)).unwrap();
        let sample = &shard[r.start as usize..r.end as usize];
        let cols = mds::split_sample(&columns, sample).unwrap();
        total += cols[text_col].len();
    }
    black_box(total);
    let lookup_ns = t.elapsed().as_nanos() as f64 / lookups as f64;

    // Lookup + split + render of the fixed-size ndarray column to .npy (allocates).
    let vec_col = columns.iter().position(|c| c.name == "vec").unwrap();
    let t = Instant::now();
    for &i in order.iter().take(500_000) {
        let r = header.sample_range(i).unwrap();
        let sample = &shard[r.start as usize..r.end as usize];
        let cols = mds::split_sample(&columns, sample).unwrap();
        black_box(mds::render(&columns[vec_col].encoding, &sample[cols[vec_col].clone()]).unwrap());
    }
    let render_ns = t.elapsed().as_nanos() as f64 / 500_000.0;

    println!(
        "shard: {} bytes, {n} samples, {} columns",
        shard.len(),
        columns.len()
    );
    println!(
        "header parse (whole 64 MiB shard): {:.1} us",
        parse_ns / 1000.0
    );
    println!("baseline copy of one sample:       {copy_ns:.1} ns/sample");
    println!(
        "lookup + column split:             {lookup_ns:.1} ns/sample ({:.2}x baseline)",
        lookup_ns / copy_ns
    );
    println!(
        "lookup + split + render .npy:      {render_ns:.1} ns/sample ({:.2}x baseline)",
        render_ns / copy_ns
    );
}
