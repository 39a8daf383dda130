//! Hidden `shardfs generate-man DIR` and `shardfs generate-completions DIR`: the man pages and
//! shell completions the packages install, generated from the one CLI definition.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::CommandFactory;

use super::Cli;

/// Arguments of the hidden generators: the folder to write into.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// Output folder (created if missing).
    pub dir: PathBuf,
}

/// Writes `shardfs.1` and one `shardfs-SUBCOMMAND.1` per visible subcommand into `dir`.
pub fn man(args: GenerateArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let cmd = Cli::command();
    write_man(&args.dir, "shardfs", cmd.clone())?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("shardfs-{}", sub.get_name());
        write_man(&args.dir, &name, sub.clone().name(name.clone()))?;
    }
    Ok(())
}

fn write_man(dir: &std::path::Path, name: &str, cmd: clap::Command) -> Result<()> {
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .with_context(|| format!("cannot render the man page {name}"))?;
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes completions for bash (`shardfs`), zsh (`_shardfs`) and fish (`shardfs.fish`).
pub fn completions(args: GenerateArgs) -> Result<()> {
    use clap_complete::Shell;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut cmd = Cli::command();
        clap_complete::generate_to(shell, &mut cmd, "shardfs", &args.dir)
            .with_context(|| format!("cannot write {shell} completions"))?;
    }
    Ok(())
}
