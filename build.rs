//! Build script: records the git commit the binary was built from, for `shardfs --version`.
//!
//! Other build steps (the CSI protocol compilation) add their own functions here; keep each one a
//! separate function called from `main`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    git_commit();
    csi_protocol();
}

/// Compiles `proto/csi.proto` (the CSI Identity and Node services) into Rust with protox, a
/// protobuf compiler written in Rust, so no system `protoc` is needed.
fn csi_protocol() {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    let fds = match protox::compile(["proto/csi.proto"], ["proto"]) {
        Ok(fds) => fds,
        Err(e) => panic!("proto/csi.proto: {e}"),
    };
    if let Err(e) = tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)
    {
        panic!("cannot generate the CSI gRPC code: {e}");
    }
}

/// Sets `SHARDFS_GIT_COMMIT` to the short commit hash of HEAD, or `unknown` outside a git checkout (a source tarball, a packaging sandbox).
/// `SHARDFS_GIT_COMMIT` in the environment wins, so packagers can pin it.
fn git_commit() {
    println!("cargo:rerun-if-env-changed=SHARDFS_GIT_COMMIT");
    if let Ok(pinned) = std::env::var("SHARDFS_GIT_COMMIT") {
        println!("cargo:rustc-env=SHARDFS_GIT_COMMIT={pinned}");
        return;
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) if !hash.is_empty() => hash,
        _ => "unknown".to_string(),
    };
    // Re-run when HEAD moves: HEAD itself, and the ref it points at (worktrees keep them apart).
    // Only existing files: cargo re-runs the script on every build for a path that is missing.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(refname) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &refname]));
        watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    }
    for path in watched.into_iter().flatten().map(PathBuf::from) {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rustc-env=SHARDFS_GIT_COMMIT={commit}");
}
