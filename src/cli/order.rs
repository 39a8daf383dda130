//! `shardfs order`: not yet implemented.

/// Arguments of `shardfs order`.
#[derive(Debug, clap::Args)]
pub struct OrderArgs {
    /// Dataset source: a local path, file://, s3://, gs://, az:// or http(s):// URL.
    pub source: String,
}

/// Runs `shardfs order`.
pub fn run(_args: OrderArgs) -> anyhow::Result<()> {
    anyhow::bail!("`shardfs order` is not implemented yet")
}
