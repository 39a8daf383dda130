//! `shardfs cat`: not yet implemented.

/// Arguments of `shardfs cat`.
#[derive(Debug, clap::Args)]
pub struct CatArgs {
    /// Dataset source: a local path, file://, s3://, gs://, az:// or http(s):// URL.
    pub source: String,
}

/// Runs `shardfs cat`.
pub fn run(_args: CatArgs) -> anyhow::Result<()> {
    anyhow::bail!("`shardfs cat` is not implemented yet")
}
