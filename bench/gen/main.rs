//! `bench-gen`: writes the benchmark dataset in two layouts from one seeded stream of samples.
//!
//! - `OUT/mds/`: an MDS dataset written by `shardfs::mds::writer` (byte-compatible with
//!   mosaicml-streaming's `MDSWriter`): columns `image` (`bytes`, random bytes of JPEG-like
//!   size) and `label` (`int`), uncompressed, 64 MiB shards unless told otherwise.
//! - `OUT/plain/LABEL/NNNNNNNN.bin`: the same image bytes, one object per sample, in
//!   ImageFolder style (the label is the folder).
//!
//! The image column is `bytes`, not `jpeg`: the bytes are random, and StreamingDataset decodes a
//! `jpeg` column with PIL, which would fail on them and would measure JPEG decoding rather than
//! data loading. Sizes are uniform in ±20 % around `--mean-bytes`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use rand::{Rng, RngCore, SeedableRng};
use shardfs::mds::writer::encode;
use shardfs::mds::{Encoding, Writer, WriterConfig};

/// Write the benchmark dataset as MDS and as one object per sample.
#[derive(Debug, Parser)]
struct Args {
    /// Output folder (gets `mds/` and `plain/`).
    #[arg(long)]
    out: PathBuf,
    /// Number of samples.
    #[arg(long, default_value_t = 20_000)]
    samples: u64,
    /// Mean image size in bytes (sizes vary ±20 %).
    #[arg(long, default_value_t = 110_000)]
    mean_bytes: u64,
    /// Number of distinct labels (ImageFolder classes).
    #[arg(long, default_value_t = 10)]
    classes: u64,
    /// MDS shard size limit in bytes (MDSWriter's default is 1 << 26).
    #[arg(long, default_value_t = 1 << 26)]
    shard_bytes: u64,
    /// Random seed.
    #[arg(long, default_value_t = 6)]
    seed: u64,
    /// Hashes the index lists for every shard, comma-separated (MDSWriter's `hashes`, e.g.
    /// `xxh3_64`); none by default, like MDSWriter.
    #[arg(long, value_delimiter = ',')]
    hashes: Vec<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mds_dir = args.out.join("mds");
    let plain_dir = args.out.join("plain");
    for d in [&mds_dir, &plain_dir] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("cannot clear {}", d.display()))?;
        }
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    for c in 0..args.classes.max(1) {
        std::fs::create_dir_all(plain_dir.join(c.to_string()))?;
    }
    let bytes_enc: Encoding = "bytes".parse()?;
    let int_enc: Encoding = "int".parse()?;
    let mut writer = Writer::new(WriterConfig {
        columns: vec![("image".into(), bytes_enc), ("label".into(), int_enc)],
        compression: None,
        hashes: args.hashes.clone(),
        size_limit: Some(args.shard_bytes),
    })?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let lo = args.mean_bytes * 4 / 5;
    let hi = (args.mean_bytes * 6 / 5).max(lo + 1);
    let mut total = 0u64;
    let mut image = Vec::new();
    for i in 0..args.samples {
        let size = rng.random_range(lo..hi) as usize;
        let label = rng.random_range(0..args.classes.max(1));
        image.resize(size, 0);
        rng.fill_bytes(&mut image);
        total += size as u64;
        // Columns are stored sorted by name: image, label.
        writer.write(&[&image, &encode::int(label as i64)])?;
        let path = plain_dir
            .join(label.to_string())
            .join(format!("{i:08}.bin"));
        std::fs::write(&path, &image)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let ds = writer.finish()?;
    for f in &ds.files {
        let path = mds_dir.join(&f.basename);
        std::fs::write(&path, &f.data)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    std::fs::write(mds_dir.join("index.json"), &ds.index_json)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{{\"samples\":{},\"image_bytes\":{},\"shards\":{},\"mds_bytes\":{}}}",
        args.samples,
        total,
        ds.files.len(),
        ds.files.iter().map(|f| f.data.len() as u64).sum::<u64>()
    )?;
    Ok(())
}
