//! `shardfs inspect`: not yet implemented.

/// Arguments of `shardfs inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Dataset source: a local path, file://, s3://, gs://, az:// or http(s):// URL.
    pub source: String,
}

/// Runs `shardfs inspect`.
pub fn run(_args: InspectArgs) -> anyhow::Result<()> {
    anyhow::bail!("`shardfs inspect` is not implemented yet")
}
