//! Records of running mount daemons, so `shardfs unmount` can wait until the daemon serving a
//! mountpoint has exited and report how it ended.
//!
//! A daemon writes `RUNTIME_DIR/KEY.pid` once its mount answers and `RUNTIME_DIR/KEY.exit`
//! (`0`, or `1 <the error>`) when it ends; KEY is derived from the absolute mountpoint.
//! RUNTIME_DIR is `$SHARDFS_RUNTIME_DIR` when set, else `/run/shardfs` for root,
//! `$XDG_RUNTIME_DIR/shardfs` or `/tmp/shardfs-UID` for other users.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The files that describe the daemon of one mountpoint.
#[derive(Debug, Clone)]
pub struct DaemonRecord {
    pid_path: PathBuf,
    exit_path: PathBuf,
}

/// How a daemon ended, as `shardfs unmount` saw it.
#[derive(Debug, PartialEq, Eq)]
pub enum DaemonExit {
    /// The daemon exited and reported success.
    Clean,
    /// The daemon exited and reported this error.
    Failed(String),
    /// The daemon's process is gone without a report (killed, e.g. by SIGKILL or the OOM killer).
    Vanished,
    /// The daemon was still running when the wait ended.
    StillRunning(u32),
}

/// Environment variable that overrides RUNTIME_DIR (the CSI plugin points it at its state dir).
pub const RUNTIME_DIR_ENV: &str = "SHARDFS_RUNTIME_DIR";

fn runtime_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(RUNTIME_DIR_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/shardfs");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("shardfs"),
        None => PathBuf::from(format!("/tmp/shardfs-{uid}")),
    }
}

impl DaemonRecord {
    /// The record of the daemon serving `mountpoint` (relative paths are made absolute).
    pub fn for_mountpoint(mountpoint: &Path) -> Self {
        let abs = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
        let text = abs.to_string_lossy();
        let key = hex::encode(&Sha256::digest(text.trim_end_matches('/').as_bytes())[..12]);
        let dir = runtime_dir();
        DaemonRecord {
            pid_path: dir.join(format!("{key}.pid")),
            exit_path: dir.join(format!("{key}.exit")),
        }
    }

    /// Called by the daemon once its mount answers: records its pid and clears an old exit report.
    pub fn register(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        if let Some(dir) = self.pid_path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let _ = std::fs::remove_file(&self.exit_path);
        std::fs::write(&self.pid_path, format!("{}\n", std::process::id()))
    }

    /// Called by the daemon as it exits: writes the exit report, then removes the pid file.
    pub fn finish(&self, outcome: &anyhow::Result<()>) {
        let report = match outcome {
            Ok(()) => "0\n".to_string(),
            Err(e) => format!("1 {}\n", format!("{e:#}").replace('\n', " ")),
        };
        if let Err(e) = std::fs::write(&self.exit_path, report) {
            tracing::warn!(path = %self.exit_path.display(), error = %e, "cannot write the exit report");
        }
        let _ = std::fs::remove_file(&self.pid_path);
    }

    /// The pid the daemon recorded, alive or not (None without a record).
    pub fn recorded_pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_path)
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The pid of the running daemon, if the record names a live shardfs process.
    pub fn running_pid(&self) -> Option<u32> {
        let pid = self.recorded_pid()?;
        // A reused pid belongs to some other program: only trust a shardfs process.
        is_shardfs(pid).then_some(pid)
    }

    /// Waits up to `timeout` for the daemon `pid` to exit, then reads its report.
    pub fn wait_for_exit(&self, pid: u32, timeout: Duration) -> DaemonExit {
        let deadline = Instant::now() + timeout;
        // The record goes before the process has ended (its last drops and exit follow):
        // wait for both, so that a caller who sees the unmount return sees the daemon gone.
        while self.running_pid() == Some(pid) || shardfs_process_lives(pid) {
            if Instant::now() >= deadline {
                return DaemonExit::StillRunning(pid);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The report is written before the pid file goes; give a just-exiting daemon a moment.
        let settle = Instant::now() + Duration::from_millis(500);
        loop {
            if let Ok(text) = std::fs::read_to_string(&self.exit_path) {
                let text = text.trim();
                return match text.split_once(' ') {
                    _ if text == "0" => DaemonExit::Clean,
                    Some((_, msg)) => DaemonExit::Failed(msg.to_string()),
                    None => DaemonExit::Failed(format!("exit report {text:?}")),
                };
            }
            if Instant::now() >= settle {
                // Forget the dead daemon's record, so the next unmount there does not repeat it.
                let _ = std::fs::remove_file(&self.pid_path);
                return DaemonExit::Vanished;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether `pid` is a shardfs process that has not exited yet (a zombie has exited).
fn shardfs_process_lives(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name in parentheses, which may itself hold ") ".
    let exited = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .is_none_or(|state| matches!(state, 'Z' | 'X'));
    !exited && is_shardfs(pid)
}

/// Whether process `pid` runs a program named shardfs (its argv[0]).
fn is_shardfs(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        cmdline
            .split(|b| *b == 0)
            .next()
            .is_some_and(|argv0| String::from_utf8_lossy(argv0).contains("shardfs"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_record_per_mountpoint_and_reports_round_trip() {
        let a = DaemonRecord::for_mountpoint(Path::new("/mnt/a"));
        let a2 = DaemonRecord::for_mountpoint(Path::new("/mnt/a/"));
        let b = DaemonRecord::for_mountpoint(Path::new("/mnt/b"));
        assert_eq!(a.pid_path, a2.pid_path);
        assert_ne!(a.pid_path, b.pid_path);

        let dir = std::env::temp_dir().join(format!("shardfs-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rec = DaemonRecord {
            pid_path: dir.join("x.pid"),
            exit_path: dir.join("x.exit"),
        };
        // A pid that is not a shardfs process is not trusted.
        std::fs::write(&rec.pid_path, "1\n").unwrap();
        assert_eq!(rec.running_pid(), None);
        rec.finish(&Err(anyhow::anyhow!("store went away")));
        assert!(!rec.pid_path.exists());
        assert_eq!(
            rec.wait_for_exit(u32::MAX, Duration::from_secs(1)),
            DaemonExit::Failed("store went away".into())
        );
        rec.finish(&Ok(()));
        assert_eq!(
            rec.wait_for_exit(u32::MAX, Duration::from_secs(1)),
            DaemonExit::Clean
        );
        std::fs::remove_file(&rec.exit_path).unwrap();
        assert_eq!(
            rec.wait_for_exit(u32::MAX, Duration::from_secs(1)),
            DaemonExit::Vanished
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
