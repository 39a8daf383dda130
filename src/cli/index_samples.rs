//! A stop-gap reader of `index.json` that takes only `shards[*].samples` from a local folder,
//! until the `mds` module's `Index::parse` lands; then `shardfs order` switches to it.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The local folder a SOURCE names (a plain path or a `file://` URL).
fn local_dir(source: &str) -> Result<PathBuf> {
    if let Some(rest) = source.strip_prefix("file://") {
        return Ok(PathBuf::from(rest));
    }
    if source.contains("://") {
        bail!("{source}: only local paths are supported by `shardfs order` for now");
    }
    Ok(PathBuf::from(source))
}

/// Sample count of each shard listed in `<source>/index.json`.
pub fn shard_samples(source: &str) -> Result<Vec<u64>> {
    let dir = local_dir(source)?;
    let path = dir.join("index.json");
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text, &path)
}

fn parse(bytes: &[u8], path: &Path) -> Result<Vec<u64>> {
    let v: serde_json::Value = serde_json::from_slice(bytes)
        .with_context(|| format!("{}: not valid JSON", path.display()))?;
    let shards = v
        .get("shards")
        .and_then(|s| s.as_array())
        .with_context(|| format!("{}: no \"shards\" list", path.display()))?;
    shards
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.get("samples").and_then(|n| n.as_u64()).with_context(|| {
                format!(
                    "{}: shards[{i}].samples is missing or not a count",
                    path.display()
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sample_counts_and_names_bad_entries() {
        let p = Path::new("x/index.json");
        assert_eq!(
            parse(
                br#"{"shards":[{"samples":3},{"samples":0}],"version":2}"#,
                p
            )
            .unwrap(),
            vec![3, 0]
        );
        let e = parse(br#"{"shards":[{"samples":3},{"samples":-1}]}"#, p).unwrap_err();
        assert!(format!("{e:#}").contains("shards[1].samples"));
        assert!(parse(b"{", p).is_err());
        assert!(local_dir("s3://b/p").is_err());
    }
}
