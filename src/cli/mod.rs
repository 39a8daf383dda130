//! `cli`: argument parsing, configuration resolution, logging and exit codes.
//!
//! Each subcommand lives in its own file with its clap `Args` struct and a `run` function;
//! this file only wires them together and turns errors into one clear line and an exit code.

mod cat;
mod csi;
mod daemon_record;
mod dataset;
mod generate;
mod inspect;
mod malloc;
pub mod metrics;
mod mount;
mod mount_options;
mod mount_setup;
mod mountinfo;
mod order;
pub mod ordering;
mod pack;
mod progress;
pub mod reference;
mod status;
pub mod store_args;

pub use csi::mount_flag_names;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// What `shardfs --version` prints: the crate version and the git commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SHARDFS_GIT_COMMIT"),
    ")"
);

/// Top-level command line of `shardfs`.
#[derive(Debug, Parser)]
#[command(
    name = "shardfs",
    version = VERSION,
    about = "Serve MDS datasets from object storage as pre-shuffled per-rank sample files"
)]
pub struct Cli {
    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it. Default: warn;
    /// error for inspect, cat and order, whose failures end in one error line that already
    /// says what each retry saw.
    #[arg(long, global = true, env = "SHARDFS_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Log line format: text for people, json (one object per line: timestamp, level,
    /// target, message and fields) for log collectors.
    #[arg(long, global = true, env = "SHARDFS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show samples, shards, columns, encodings, bytes, compression and hashes of a dataset.
    Inspect(inspect::InspectArgs),
    /// Write one sample's column file bytes to stdout (random access by global sample id).
    Cat(cat::CatArgs),
    /// Print rank R's global sample ids for epoch E, one per line, in read order.
    Order(order::OrderArgs),
    /// Mount a dataset as a read-only tree of per-rank sample files.
    Mount(mount::MountArgs),
    /// Unmount a shardfs mount (type fuse.shardfs; any other filesystem is refused), wait for
    /// its daemon to exit and report how it ended.
    Unmount(mount::UnmountArgs),
    /// Run the Kubernetes CSI node plugin (gRPC on a unix socket).
    Csi(csi::CsiArgs),
    /// Show a live view of a mount: per-rank progress, cache, fetches, stalls, errors.
    Status(status::StatusArgs),
    /// Turn an ImageFolder tree, JSON Lines, Parquet or WebDataset tars into an MDS dataset (as
    /// MDSWriter writes it); --part K/N and --merge spread the work over many machines.
    Pack(pack::PackArgs),
    /// Write the man pages into DIR (for packagers).
    #[command(hide = true)]
    GenerateMan(generate::GenerateArgs),
    /// Write bash, zsh and fish completions into DIR (for packagers).
    #[command(hide = true)]
    GenerateCompletions(generate::GenerateArgs),
    /// Print the generated reference of docs/CONFIGURATION.md.
    #[command(hide = true)]
    GenerateConfigReference,
}

/// Entry point of the `shardfs` binary: parse, run, and map errors to one line and exit code 1.
pub fn main() -> ExitCode {
    let known = std::cell::OnceCell::new();
    let is_flag = |key: &str| {
        known
            .get_or_init(|| {
                let mut names = mount_flag_names();
                let cmd = <Cli as clap::CommandFactory>::command();
                names.extend(
                    cmd.get_arguments()
                        .filter_map(|a| a.get_long().map(str::to_string)),
                );
                names
            })
            .iter()
            .any(|n| n == key)
    };
    let args = match mount_options::expand(std::env::args_os().collect(), is_flag) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("shardfs: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(args);
    let one_shot = matches!(
        cli.command,
        Command::Inspect(_) | Command::Cat(_) | Command::Order(_)
    );
    let log_level = cli
        .log_level
        .clone()
        .unwrap_or_else(|| if one_shot { "error" } else { "warn" }.to_string());
    init_logging(&log_level, cli.log_format);
    if matches!(cli.command, Command::Mount(_)) {
        malloc::reexec_with_daemon_tunables();
        malloc::tune_for_daemon();
    }
    // Daemons and mounts this process starts (background mounts, the CSI plugin's) log alike.
    // SAFETY: still single-threaded here; nothing reads the environment concurrently.
    std::env::set_var("SHARDFS_LOG_LEVEL", &log_level);
    std::env::set_var(
        "SHARDFS_LOG_FORMAT",
        match cli.log_format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        },
    );
    let result = match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::Cat(a) => cat::run(a),
        Command::Order(a) => order::run(a),
        Command::Mount(a) => mount::run(a),
        Command::Unmount(a) => mount::run_unmount(a),
        Command::Csi(a) => csi::run(a),
        Command::Status(a) => status::run(a),
        Command::Pack(a) => pack::run(a),
        Command::GenerateMan(a) => generate::man(a),
        Command::GenerateCompletions(a) => generate::completions(a),
        Command::GenerateConfigReference => reference::run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shardfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(level: &str, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
}
