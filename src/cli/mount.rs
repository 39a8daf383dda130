//! `shardfs mount` / `shardfs unmount`: checks, background start, signals, clean unmount.
//!
//! Background mode re-executes this binary with `--foreground` in a new session and waits on a
//! readiness pipe: the child writes `ok` and the mount's one-line summary once the FUSE
//! handshake is done (the mount answers), or the one-line error that stopped it, so
//! `shardfs mount` returns only when the mount is usable, printing that summary, and fails
//! with the child's message otherwise. The child logs to `CACHE_DIR/shardfs.log`.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::daemon_record::{DaemonExit, DaemonRecord};
use super::mount_setup::{self, MountConfig};

/// Environment variable that carries the readiness pipe to the background child.
const READY_FD_ENV: &str = "SHARDFS_READY_FD";

/// Arguments of `shardfs mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    #[command(flatten)]
    pub(super) config: MountConfig,
    /// Stay in the foreground (log to stderr) instead of returning once the mount answers.
    #[arg(long)]
    pub foreground: bool,
    /// Mount options as `key=value,...` (each key is the long option of the same name), for
    /// `mount -t shardfs` and /etc/fstab.
    #[arg(short = 'o', value_name = "KEY=VALUE,...")]
    pub options: Vec<String>,
}

/// Arguments of `shardfs unmount`.
#[derive(Debug, clap::Args)]
pub struct UnmountArgs {
    /// The mountpoint to unmount.
    pub mountpoint: PathBuf,
    /// Seconds to wait for the daemon to exit after the unmount (0: do not wait).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout: u64,
}

/// Runs `shardfs mount`.
pub fn run(args: MountArgs) -> Result<()> {
    let ready = match std::env::var(READY_FD_ENV)
        .ok()
        .and_then(|v| v.parse::<RawFd>().ok())
    {
        // SAFETY: the parent passed this descriptor to us for our exclusive use.
        Some(fd) if fd > 2 => Some(unsafe { OwnedFd::from_raw_fd(fd) }),
        _ => None,
    };
    args.config.check_arguments()?;
    if ready.is_none() {
        warn_if_not_empty(args.config.mountpoint());
    }
    if ready.is_some() || args.foreground {
        std::env::remove_var(READY_FD_ENV);
        return run_foreground(&args.config, ready);
    }
    let summary = start_background(&args.config)?;
    println!("{summary}");
    Ok(())
}

/// Tells the user (on stderr, before anything starts) that mounting hides what `mnt` holds.
fn warn_if_not_empty(mnt: &Path) {
    let holds_something = std::fs::read_dir(mnt).is_ok_and(|mut d| d.next().is_some());
    if holds_something && !is_mountpoint(mnt) {
        eprintln!(
            "shardfs: warning: {} is not empty: its files are hidden while the dataset is mounted there",
            mnt.display()
        );
    }
}

/// Starts the daemon and waits until its mount answers; gives its one-line summary.
fn start_background(config: &MountConfig) -> Result<String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("cannot create a pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors that we now own.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let cache_dir = config.cache_dir();
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cache_dir)
            .with_context(|| format!("cannot create cache dir {}", cache_dir.display()))?;
    }
    let log_path = cache_dir.join("shardfs.log");
    let log = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
    }
    .with_context(|| format!("cannot open log file {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find the shardfs executable")?;
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    args.push("--foreground".into());
    let child_fd = fds[1];
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env(READY_FD_ENV, child_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: only async-signal-safe calls (setsid, fcntl) run between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            libc::setsid();
            let flags = libc::fcntl(child_fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(child_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .context("cannot start the background shardfs process")?;
    drop(write_end);
    let spinner = super::progress::spinner(format!(
        "mounting {}: opening the dataset and planning the epochs",
        config.source().unwrap_or("the streams")
    ));
    let mut msg = String::new();
    let _ = std::fs::File::from(read_end).read_to_string(&mut msg);
    drop(spinner);
    let msg = msg.trim();
    if let Some(summary) = msg.strip_prefix("ok") {
        return Ok(format!("{}; log: {}", summary.trim(), log_path.display()));
    }
    let status = child.wait().ok();
    if let Some(err) = msg.strip_prefix("error: ") {
        bail!("{err}");
    }
    bail!(
        "the background shardfs process exited ({}) before the mount was ready; see {}",
        status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "unknown status".into()),
        log_path.display()
    )
}

fn tell(ready: &mut Option<OwnedFd>, msg: &str) {
    if let Some(fd) = ready.take() {
        let mut f = std::fs::File::from(fd);
        let _ = f.write_all(msg.as_bytes());
    }
}

fn run_foreground(config: &MountConfig, mut ready: Option<OwnedFd>) -> Result<()> {
    // Block the termination signals in every thread (threads inherit the mask); one thread
    // waits for them and unmounts, which ends the serving loop cleanly.
    let signals = block_signals();
    let mounted = mount_setup::check_and_mount(config);
    let (mut mounted, summary) = match mounted {
        Ok(m) => m,
        Err(e) => {
            tell(&mut ready, &format!("error: {e:#}\n"));
            return Err(e);
        }
    };
    let mut unmounter = mounted.unmounter();
    let mountpoint = config.mountpoint().to_path_buf();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `signals` is an initialised set; sig is a valid out-pointer.
            if unsafe { libc::sigwait(&signals, &mut sig) } == 0 {
                tracing::info!(signal = sig, mountpoint = %mountpoint.display(), "unmounting on signal");
                if let Err(e) = unmounter.unmount() {
                    tracing::error!(error = %e, "unmount failed");
                }
            }
        })
        .context("cannot start the signal thread")?;
    tracing::info!(mountpoint = %config.mountpoint().display(), "mounted");
    let record = DaemonRecord::for_mountpoint(config.mountpoint());
    if let Err(e) = record.register() {
        tracing::warn!(error = %e, "cannot record the daemon's pid: `shardfs unmount` will not wait for it");
    }
    super::malloc::start_trimming();
    if ready.is_some() {
        tell(&mut ready, &format!("ok {summary}\n"));
    } else {
        println!("{summary}");
    }
    let outcome = mounted.serve().context("FUSE session ended with an error");
    record.finish(&outcome);
    outcome?;
    tracing::info!("unmounted, exiting");
    Ok(())
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; the libc calls only initialise and apply it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Runs `shardfs unmount`: unmounts, then waits for the daemon to exit and reports how it ended.
pub fn run_unmount(args: UnmountArgs) -> Result<()> {
    let p = &args.mountpoint;
    let Some(entry) = mounted_at(p) else {
        bail!("{} is not a mounted filesystem", p.display());
    };
    // Only ours: a mistyped path must not take down another filesystem.
    if entry.fs_type != crate::fuse::FS_TYPE {
        bail!(
            "{} is not a shardfs mount (it is {} from {}): use umount for it",
            p.display(),
            entry.fs_type,
            entry.source
        );
    }
    let record = DaemonRecord::for_mountpoint(p);
    let daemon = record.recorded_pid();
    detach(p)?;
    let Some(pid) = daemon.filter(|_| args.timeout > 0) else {
        return Ok(());
    };
    match record.wait_for_exit(pid, std::time::Duration::from_secs(args.timeout)) {
        DaemonExit::Clean => Ok(()),
        DaemonExit::Failed(msg) => bail!(
            "{} is unmounted, but its daemon (pid {pid}) exited with an error: {msg}",
            p.display()
        ),
        DaemonExit::Vanished => bail!(
            "{} is unmounted, but its daemon (pid {pid}) ended without reporting (killed?)",
            p.display()
        ),
        DaemonExit::StillRunning(pid) => bail!(
            "{} is unmounted, but its daemon (pid {pid}) is still running after {} s",
            p.display(),
            args.timeout
        ),
    }
}

/// Detaches the filesystem at `p`: umount2 as root, fusermount3 otherwise.
fn detach(p: &Path) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes())
            .context("mountpoint contains a NUL byte")?;
        // SAFETY: c is a valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EBUSY) {
                bail!(
                    "{} is busy (files are open or a process works in it)",
                    p.display()
                );
            }
            bail!("cannot unmount {}: {e}", p.display());
        }
        return Ok(());
    }
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg(p)
        .output()
        .context("cannot run fusermount3 (install the fuse3 package)")?;
    if !out.status.success() {
        bail!(
            "cannot unmount {}: {}",
            p.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The filesystem mounted at a mountpoint, as `/proc/self/mountinfo` gives it.
#[derive(Debug, PartialEq)]
pub(super) struct MountEntry {
    /// The filesystem type (`fuse.shardfs` for ours).
    pub fs_type: String,
    /// The device name (the SOURCE for ours).
    pub source: String,
}

/// Whether `p` is the mount point of a mounted filesystem (per /proc/self/mountinfo).
pub(super) fn is_mountpoint(p: &Path) -> bool {
    mounted_at(p).is_some()
}

/// The filesystem mounted at `p` (the top one where several are stacked), if any.
pub(super) fn mounted_at(p: &Path) -> Option<MountEntry> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let abs = abs.to_string_lossy();
    let target = match abs.trim_end_matches('/') {
        "" => "/",
        t => t,
    };
    info.lines()
        .filter_map(parse_mountinfo_line)
        .fold(
            None,
            |top, (point, entry)| {
                if point == target {
                    Some(entry)
                } else {
                    top
                }
            },
        )
}

/// (mountpoint, entry) of one mountinfo line: `ID PARENT MAJ:MIN ROOT POINT OPTIONS
/// [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS` (proc(5)), fields octal-escaped.
fn parse_mountinfo_line(line: &str) -> Option<(String, MountEntry)> {
    let mut fields = line.split(' ');
    let point = unescape_mountinfo(fields.nth(4)?);
    let mut after_dash = fields.skip_while(|f| *f != "-").skip(1);
    let fs_type = unescape_mountinfo(after_dash.next()?);
    let source = unescape_mountinfo(after_dash.next()?);
    Some((point, MountEntry { fs_type, source }))
}

/// Undoes mountinfo's `\NNN` octal escapes (space, tab, newline, backslash).
fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let v = d.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_type_and_source_unescaped() {
        let l = "36 35 0:45 / /tmp/a\\040b rw,relatime shared:1 master:2 - fuse.shardfs s3://b/x\\040y ro";
        assert_eq!(
            parse_mountinfo_line(l),
            Some((
                "/tmp/a b".to_string(),
                MountEntry {
                    fs_type: "fuse.shardfs".into(),
                    source: "s3://b/x y".into()
                }
            ))
        );
        let l = "22 1 0:21 / /tmp/x rw - tmpfs none rw";
        assert_eq!(
            parse_mountinfo_line(l).map(|(_, e)| e.fs_type),
            Some("tmpfs".into())
        );
        assert_eq!(parse_mountinfo_line("garbage"), None);
    }
}
