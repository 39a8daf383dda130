//! `pack --merge DEST`: one `index.json` over the part folders `DEST/part-KKKKK/`, as
//! mosaicml-streaming's `merge_index` writes it (`streaming/base/util.py`,
//! `_merge_index_from_list`): each part's shard entries in part order, every basename prefixed
//! with the part's folder (`part-00001/shard.00000.mds`), the whole written by `json.dump` of
//! `{"version": 2, "shards": [...]}` (that key order, each entry's keys as its part's index
//! holds them). StreamingDataset then reads part 0's samples, then part 1's, and so on: the
//! order of a single pack of the whole input.
//!
//! The parts must be `part-00000` up to some `part-MMMMM` with no gap, each finished (with its
//! own `index.json`); otherwise nothing is written. Run it once every part has finished (the
//! Indexed Job or job array has completed): a part that is still missing at the end cannot be
//! told from one that was never asked for.

use super::dest::Dest;
use super::error::{PackError, Result};
use crate::mds::pyjson::dumps_sorted;
use crate::mds::Index;
use serde_json::Value;

/// What a merge wrote.
#[derive(Debug, Clone)]
pub struct MergeSummary {
    /// Parts merged.
    pub parts: usize,
    /// Shards in the merged index.
    pub shards: usize,
    /// Samples in the merged index.
    pub samples: u64,
}

fn part_number(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("part-")?;
    (digits.len() == 5 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Merges the parts under `dest` into `dest/index.json`.
pub fn merge(dest: &Dest) -> Result<MergeSummary> {
    let mut parts: Vec<(usize, String)> = dest
        .list()?
        .into_iter()
        .filter_map(|n| part_number(&n).map(|k| (k, n)))
        .collect();
    parts.sort();
    if parts.is_empty() {
        return Err(PackError::Dest(format!(
            "{}: no part-KKKKK folder to merge (pack with --part K/N first)",
            dest.display()
        )));
    }
    for (want, (k, name)) in parts.iter().enumerate() {
        if *k != want {
            return Err(PackError::Dest(format!(
                "{}: part-{want:05} is missing (found {name}); every part must finish before \
                 the merge",
                dest.display()
            )));
        }
    }
    let mut shards: Vec<String> = Vec::new();
    let mut samples = 0u64;
    for (_, name) in &parts {
        let part = dest.child(name);
        let bytes = part.read(crate::mds::INDEX_FILE).map_err(|e| {
            PackError::Dest(format!(
                "{}/index.json cannot be read ({e}); has that part finished?",
                part.display()
            ))
        })?;
        let index = Index::parse(&bytes)
            .map_err(|e| PackError::Dest(format!("{}/index.json: {e}", part.display())))?;
        samples += index.num_samples();
        let parsed: Value = serde_json::from_slice(&bytes)
            .map_err(|e| PackError::Dest(format!("{}/index.json: {e}", part.display())))?;
        let Some(entries) = parsed.get("shards").and_then(Value::as_array) else {
            return Err(PackError::Dest(format!(
                "{}/index.json has no shard list",
                part.display()
            )));
        };
        for entry in entries {
            let mut entry = entry.clone();
            for key in ["raw_data", "zip_data", "raw_meta", "zip_meta"] {
                if let Some(Value::String(b)) =
                    entry.get_mut(key).and_then(|f| f.get_mut("basename"))
                {
                    *b = format!("{name}/{b}");
                }
            }
            // The part's index was written with sorted keys, which is the order json.load
            // keeps and json.dump writes back.
            shards.push(dumps_sorted(&entry));
        }
    }
    let text = format!("{{\"version\": 2, \"shards\": [{}]}}", shards.join(", "));
    // What we write must read back as a valid index.
    Index::parse(text.as_bytes())?;
    dest.put(crate::mds::INDEX_FILE, text.as_bytes())?;
    Ok(MergeSummary {
        parts: parts.len(),
        shards: shards.len(),
        samples,
    })
}
