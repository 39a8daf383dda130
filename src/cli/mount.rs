//! `shardfs mount` / `shardfs unmount`: not yet implemented.

/// Arguments of `shardfs mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// Dataset source.
    pub source: String,
    /// Where to mount.
    pub mountpoint: std::path::PathBuf,
}

/// Arguments of `shardfs unmount`.
#[derive(Debug, clap::Args)]
pub struct UnmountArgs {
    /// The mountpoint to unmount.
    pub mountpoint: std::path::PathBuf,
}

/// Runs `shardfs mount`.
pub fn run(_args: MountArgs) -> anyhow::Result<()> {
    anyhow::bail!("`shardfs mount` is not implemented yet")
}

/// Runs `shardfs unmount`.
pub fn run_unmount(_args: UnmountArgs) -> anyhow::Result<()> {
    anyhow::bail!("`shardfs unmount` is not implemented yet")
}
