//! A moto S3 server on loopback, shared by all tests of the binary, and a boto3 uploader.
//!
//! moto is an S3 implementation nobody here wrote; it does not verify SigV4 (see the
//! in-process s3s server for that). `SHARDFS_MOTO_SERVER` names its executable and
//! `SHARDFS_PYTHON` a python with boto3 (`tests/run.sh` installs both into a venv and sets
//! them); otherwise `moto_server`/`python3` on PATH are tried. A test that needs moto fails
//! when it is missing: it never skips.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A running moto server.
pub struct Moto {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

fn moto_binary() -> Option<String> {
    if let Ok(p) = std::env::var("SHARDFS_MOTO_SERVER") {
        return Some(p);
    }
    let found = Command::new("sh")
        .arg("-c")
        .arg("command -v moto_server")
        .output()
        .ok()?;
    let path = String::from_utf8(found.stdout).ok()?.trim().to_string();
    (!path.is_empty()).then_some(path)
}

/// The python to run boto3 with.
pub fn python() -> String {
    super::python_with_numpy()
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// The shared moto server, started on first use. Panics (failing the test) when moto is not
/// installed.
pub fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(start)
}

fn start() -> Moto {
    let Some(bin) = moto_binary() else {
        panic!(
            "no moto server: run the tests with `bash tests/run.sh` (it installs moto into a venv), \
             or set SHARDFS_MOTO_SERVER to a moto_server executable"
        );
    };
    let port = free_port();
    // Start it from a thread that lives as long as the process, so PR_SET_PDEATHSIG (which
    // fires when the spawning *thread* exits) kills moto exactly when the tests end.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&bin);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn();
        let _ = tx.send(child.map(|_| ()).map_err(|e| format!("{bin}: {e}")));
        loop {
            std::thread::park();
        }
    });
    if let Ok(Err(e)) = rx.recv() {
        panic!("cannot start moto server: {e}");
    }
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "moto server did not listen on {addr} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Moto {
        endpoint: format!("http://127.0.0.1:{port}"),
    }
}

impl Moto {
    /// Creates `bucket` and uploads every file under `dir` to `prefix/<relative path>` with boto3.
    pub fn upload_dir(&self, bucket: &str, prefix: &str, dir: &Path) {
        self.upload(bucket, prefix, dir, false)
    }

    /// Like [`Moto::upload_dir`], with `public-read` ACLs so anonymous (unsigned and plain
    /// HTTP) requests may read the objects.
    pub fn upload_dir_public(&self, bucket: &str, prefix: &str, dir: &Path) {
        self.upload(bucket, prefix, dir, true)
    }

    fn upload(&self, bucket: &str, prefix: &str, dir: &Path, public: bool) {
        let script = r#"
import os, sys, boto3
endpoint, bucket, prefix, root, public = sys.argv[1:6]
extra = {"ACL": "public-read"} if public == "1" else {}
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
try:
    s3.create_bucket(Bucket=bucket)
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass
for d, _, files in os.walk(root):
    for f in files:
        full = os.path.join(d, f)
        rel = os.path.relpath(full, root).replace(os.sep, "/")
        key = f"{prefix}/{rel}" if prefix else rel
        s3.upload_file(full, bucket, key, ExtraArgs=extra)
"#;
        let mut child = Command::new(python())
            .args(["-c", script, &self.endpoint, bucket, prefix])
            .arg(dir)
            .arg(if public { "1" } else { "0" })
            .env_remove("AWS_CA_BUNDLE")
            .stdin(Stdio::null())
            .spawn()
            .expect("cannot run python for boto3 uploads (set SHARDFS_PYTHON)");
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "boto3 upload of {} to {bucket}/{prefix} failed",
            dir.display()
        );
    }

    /// Uploads one object with boto3 (creating the bucket).
    pub fn put(&self, bucket: &str, key: &str, data: &[u8]) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("obj");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(data)
            .unwrap();
        let script = r#"
import sys, boto3
endpoint, bucket, key, path = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
try:
    s3.create_bucket(Bucket=bucket)
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass
s3.upload_file(path, bucket, key)
"#;
        let status = Command::new(python())
            .args(["-c", script, &self.endpoint, bucket, key])
            .arg(&path)
            .env_remove("AWS_CA_BUNDLE")
            .status()
            .expect("cannot run python for boto3 uploads (set SHARDFS_PYTHON)");
        assert!(status.success(), "boto3 put of {bucket}/{key} failed");
    }
}

/// Store options for a loopback S3 endpoint: fixed test credentials, fast retries.
pub fn s3_options(endpoint: &str) -> shardfs::store::StoreOptions {
    shardfs::store::StoreOptions {
        endpoint_url: Some(endpoint.to_string()),
        region: Some("us-east-1".into()),
        credentials: Some(shardfs::store::StaticCredentials {
            access_key_id: "test".into(),
            secret_access_key: "test".into(),
            session_token: None,
        }),
        max_retries: 3,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        request_timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(2),
        ..Default::default()
    }
}
