//! The `shardfs` command: everything lives in the library's `cli` module.

fn main() -> std::process::ExitCode {
    shardfs::cli::main()
}
