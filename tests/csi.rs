//! The CSI node plugin, driven over gRPC the way kubelet drives it: `shardfs csi` on a unix
//! socket, stage/publish/unpublish into a `/var/lib/kubelet`-like tree, real FUSE mounts of the
//! fixtures (local and through the moto S3 server), a killed plugin and every error of the spec.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shardfs::csi::proto::identity_client::IdentityClient;
use shardfs::csi::proto::node_client::NodeClient;
use shardfs::csi::proto::volume_capability::{access_mode, AccessMode, AccessType, MountVolume};
use shardfs::csi::proto::*;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use crate::common::fixtures;
use crate::mount::bin;

/// A `shardfs csi` process in its own process group, with a kubelet-like folder tree.
struct Plugin {
    child: Option<Child>,
    root: PathBuf,
    /// Arguments added to `shardfs csi`.
    extra: Vec<String>,
    /// Environment variables added to `shardfs csi`.
    env: Vec<(String, String)>,
    /// When set, the plugin runs in a cgroup of its own in every hierarchy, as in a container.
    container: Option<Container>,
    _dir: tempfile::TempDir,
}

/// What a container runtime gives the plugin's container and how it stops it: a cgroup of its
/// own in every hierarchy and a private cgroup namespace; stopping kills every process of the
/// cgroup (cgroup.kill on v2, SIGKILL to each listed pid on v1, as runc does).
struct Container {
    /// `HIERARCHY/shardfs-test-ctr-N` for every cgroup hierarchy under /sys/fs/cgroup.
    cgroups: Vec<PathBuf>,
    /// Passed to the plugin: daemons go to `HIERARCHY/NAME` (None: the plugin is not told).
    daemon_cgroup: Option<String>,
    /// A network namespace of its own (a bind-mounted one, `ip netns`), as a pod has.
    netns: Option<PathBuf>,
}

fn cgroup_hierarchies() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let found = shardfs::csi::host_cgroup::hierarchies_under(&info, Path::new("/sys/fs/cgroup"));
    assert!(
        !found.is_empty(),
        "no cgroup hierarchy under /sys/fs/cgroup: the container test needs one"
    );
    found
}

fn unique_name(what: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("shardfs-test-{what}-{}-{n}", std::process::id())
}

impl Container {
    fn new(daemon_cgroup: Option<String>) -> Container {
        let name = unique_name("ctr");
        let mut cgroups = Vec::new();
        for h in cgroup_hierarchies() {
            let dir = h.join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            for f in ["cpuset.cpus", "cpuset.mems"] {
                if dir.join(f).exists() {
                    std::fs::write(
                        dir.join(f),
                        std::fs::read_to_string(h.join(f)).unwrap().trim(),
                    )
                    .unwrap();
                }
            }
            cgroups.push(dir);
        }
        Container {
            cgroups,
            daemon_cgroup,
            netns: None,
        }
    }

    fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .cgroups
            .iter()
            .flat_map(|c| {
                std::fs::read_to_string(c.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Stops the container the way runc does: every process of its cgroup gets SIGKILL.
    fn kill(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            for c in &self.cgroups {
                let _ = std::fs::write(c.join("cgroup.kill"), "1");
            }
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "processes survive: {pids:?}");
            for pid in pids {
                // SAFETY: signalling processes of the cgroup this test created.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.kill();
        for c in &self.cgroups {
            let _ = std::fs::remove_dir(c);
        }
    }
}

impl Plugin {
    fn start() -> Plugin {
        Plugin::start_with(None)
    }

    /// A plugin started with `args` added.
    fn start_args(args: &[&str]) -> Plugin {
        Plugin::start_full(None, args)
    }

    fn start_with(container: Option<Container>) -> Plugin {
        Plugin::start_full(container, &[])
    }

    fn start_full(container: Option<Container>, args: &[&str]) -> Plugin {
        Plugin::start_env(container, args, &[])
    }

    fn start_env(container: Option<Container>, args: &[&str], env: &[(&str, &str)]) -> Plugin {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let mut p = Plugin {
            child: None,
            root,
            extra: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            container,
            _dir: dir,
        };
        p.spawn();
        p
    }

    fn socket(&self) -> PathBuf {
        self.root.join("plugins/csi.shardfs.dev/csi.sock")
    }

    /// Starts a plugin process on this tree (again, after a kill).
    fn spawn(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let mut cmd = Command::new(bin());
        cmd.arg("csi")
            .arg("--endpoint")
            .arg(format!("unix://{}", self.socket().display()))
            .arg("--node-id")
            .arg("node-a")
            .arg("--cache-root")
            .arg(self.root.join("cache"))
            .arg("--state-dir")
            .arg(self.root.join("state"))
            .arg("--mount-timeout")
            .arg("60")
            .arg("--log-level")
            .arg("info")
            .args(&self.extra)
            .env_remove("AWS_CA_BUNDLE")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.root.join("plugin.log"))
                    .unwrap(),
            )
            // Its own process group, as a container's processes are: kill_group reaches it all.
            .process_group(0);
        if let Some(c) = &self.container {
            if let Some(name) = &c.daemon_cgroup {
                cmd.arg("--host-cgroupfs")
                    .arg("/sys/fs/cgroup")
                    .arg("--daemon-cgroup")
                    .arg(name)
                    // PID 1 stands for the host in a cluster; here the test's namespaces do.
                    .arg("--host-cgroup-namespace")
                    .arg(format!("/proc/{}/ns/cgroup", std::process::id()));
                if !self.extra.iter().any(|a| a == "--host-network-namespace") {
                    cmd.arg("--host-network-namespace")
                        .arg(format!("/proc/{}/ns/net", std::process::id()));
                }
            }
            let netns = c.netns.as_ref().map(|n| std::fs::File::open(n).unwrap());
            let procs: Vec<std::ffi::CString> = c
                .cgroups
                .iter()
                .map(|d| std::ffi::CString::new(d.join("cgroup.procs").to_str().unwrap()).unwrap())
                .collect();
            // SAFETY: only system calls on data prepared before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    for p in &procs {
                        let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                        if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        libc::close(fd);
                    }
                    if libc::unshare(libc::CLONE_NEWCGROUP) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if let Some(ns) = &netns {
                        use std::os::fd::AsRawFd;
                        if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        self.child = Some(cmd.spawn().unwrap());
        // Ready when it accepts a connection: the socket file appears at bind(), a moment
        // before listen(), and a client in between is refused.
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(self.socket()).is_err() {
            assert!(Instant::now() < deadline, "no socket: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("plugin.log")).unwrap_or_default()
    }

    /// SIGKILL to the plugin's whole process group, as a container restart does (in a
    /// container: to every process of its cgroup).
    fn kill_group(&mut self) {
        if let Some(c) = &self.container {
            c.kill();
        }
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling the process group this test created.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }

    async fn channel(&self) -> Channel {
        let sock = self.socket();
        Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let sock = sock.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(sock).await?,
                    ))
                }
            }))
            .await
            .unwrap()
    }

    async fn node(&self) -> NodeClient<Channel> {
        NodeClient::new(self.channel().await)
    }

    /// A pod's target path, as kubelet builds it.
    fn target(&self, pod: &str) -> PathBuf {
        self.root
            .join(format!("pods/{pod}/volumes/kubernetes.io~csi/train/mount"))
    }

    /// A PV's staging path, as kubelet builds it.
    fn staging(&self, pv: &str) -> PathBuf {
        let p = self.root.join(format!(
            "plugins/kubernetes.io/csi/csi.shardfs.dev/{pv}/globalmount"
        ));
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.kill_group();
        // Whatever a failed test left mounted under the tree.
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let root = self.root.to_string_lossy().to_string();
        let mut mounts: Vec<String> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|m| m.starts_with(&root))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let c = std::ffi::CString::new(m).unwrap();
            // SAFETY: a valid path string.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

fn ctx(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What csi-sanity and kubelet send for a filesystem volume.
fn mount_cap() -> Option<VolumeCapability> {
    Some(VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: access_mode::Mode::SingleNodeWriter as i32,
        }),
    })
}

/// A PersistentVolume's publish, mounted at the target (its staging path names no staged
/// mount, as when the PV uses the pod's own token); tests of staging set the staging path.
fn publish(
    volume: &str,
    target: &Path,
    context: HashMap<String, String>,
) -> NodePublishVolumeRequest {
    NodePublishVolumeRequest {
        volume_id: volume.into(),
        target_path: target.to_string_lossy().into(),
        staging_target_path: format!(
            "/var/lib/kubelet/plugins/kubernetes.io/csi/csi.shardfs.dev/{volume}/globalmount"
        ),
        volume_capability: mount_cap(),
        readonly: false,
        volume_context: context,
        ..Default::default()
    }
}

/// An inline (ephemeral) volume's publish, as kubelet sends it: no staging path, and
/// `csi.storage.k8s.io/ephemeral: "true"` among the pod's info.
fn publish_inline(
    volume: &str,
    target: &Path,
    mut context: HashMap<String, String>,
) -> NodePublishVolumeRequest {
    context.insert("csi.storage.k8s.io/ephemeral".into(), "true".into());
    NodePublishVolumeRequest {
        staging_target_path: String::new(),
        ..publish(volume, target, context)
    }
}

/// The arguments of the process with `pid`.
fn cmdline(pid: u64) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The cache folders under the plugin's cache root.
fn caches(p: &Plugin) -> Vec<PathBuf> {
    std::fs::read_dir(p.root.join("cache"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn unpublish(volume: &str, target: &Path) -> NodeUnpublishVolumeRequest {
    NodeUnpublishVolumeRequest {
        volume_id: volume.into(),
        target_path: target.to_string_lossy().into(),
    }
}

fn is_mounted(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = p.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&p))
}

fn daemon_pid(mnt: &Path) -> u64 {
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(mnt.join(".shardfs/status.json")).unwrap()).unwrap();
    s["pid"].as_u64().unwrap()
}

fn alive(pid: u64) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(") ").next().and_then(|r| r.chars().next());
    !matches!(state, None | Some('Z') | Some('X'))
}

/// The mount at `mnt` serves `dataset`: the same index.json, and every file of rank 0's first
/// epoch reads to its listed size.
fn check_reads(mnt: &Path, dataset: &Path) {
    assert_eq!(
        std::fs::read(mnt.join("index.json")).unwrap(),
        std::fs::read(dataset.join("index.json")).unwrap()
    );
    let dir = mnt.join("rank-0/epoch-0");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        let data = std::fs::read(e.path()).unwrap();
        assert_eq!(data.len() as u64, e.metadata().unwrap().len());
        n += 1;
    }
    assert!(n > 0, "{} is empty", dir.display());
    // Read-only, whatever the access mode asked for.
    let err = std::fs::write(mnt.join("new-file"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_identity_capabilities_and_node_info() {
    let p = Plugin::start();
    let mut id = IdentityClient::new(p.channel().await);
    let info = id
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "csi.shardfs.dev");
    assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
    let probe = id.probe(ProbeRequest {}).await.unwrap().into_inner();
    assert_eq!(probe.ready, Some(true));
    let caps = id
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(caps.capabilities.is_empty(), "a node-only plugin: {caps:?}");
    let mut node = p.node().await;
    let caps = node
        .node_get_capabilities(NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    use shardfs::csi::proto::node_service_capability::{rpc, Type};
    let mut got: Vec<i32> = caps
        .capabilities
        .iter()
        .filter_map(|c| c.r#type.as_ref().map(|Type::Rpc(r)| r.r#type))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            rpc::Type::StageUnstageVolume as i32,
            rpc::Type::GetVolumeStats as i32,
            rpc::Type::ExpandVolume as i32,
            rpc::Type::VolumeCondition as i32,
        ]
    );
    let info = node
        .node_get_info(NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, "node-a");
}

/// An inline volume on a node that allows those with their own credentials: it mounts the
/// dataset from S3 (moto) with the pod's secret, answers repeated publishes, gets the default
/// cacheLimit, and its cache goes with its unpublish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_inline_volume_publishes_reads_and_unpublishes_idempotently() {
    let moto = crate::common::moto::moto();
    let dataset = fixtures().join("mds/basic");
    moto.upload_dir("csi-inline", "ds/basic", &dataset);
    let p = Plugin::start_args(&[
        "--inline-volumes",
        "own-credentials",
        "--inline-allow-host",
        "127.0.0.1",
        "--default-cache-limit",
        "64MiB",
    ]);
    let mut node = p.node().await;
    let target = p.target("pod-1");
    let context = ctx(&[
        ("source", "s3://csi-inline/ds/basic"),
        ("endpointUrl", &moto.endpoint),
        ("region", "us-east-1"),
        ("shuffle", "true"),
        ("ranksPerNode", "2"),
        ("csi.storage.k8s.io/pod.name", "train-0"),
    ]);
    let secret = ctx(&[
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
    ]);
    let mut req = publish_inline("vol-1", &target, context.clone());
    req.secrets = secret.clone();
    node.node_publish_volume(req.clone()).await.unwrap();
    assert!(is_mounted(&target));
    check_reads(&target, &dataset);
    assert!(target.join("rank-1/epoch-0").is_dir());
    let pid = daemon_pid(&target);
    assert!(
        cmdline(pid).contains(&format!("--cache-limit={}", 64u64 << 20)),
        "the default cacheLimit: {:?}",
        cmdline(pid)
    );
    let cache = caches(&p);
    assert_eq!(cache.len(), 1, "{cache:?}");
    assert!(cmdline(pid).contains(&cache[0].to_string_lossy().to_string()));
    // The same request again: success, nothing new mounted.
    node.node_publish_volume(req.clone()).await.unwrap();
    assert_eq!(daemon_pid(&target), pid);
    // Volume stats and condition of the published path; NotFound elsewhere.
    let stats = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "vol-1".into(),
            volume_path: target.to_string_lossy().into(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let condition = stats.volume_condition.unwrap();
    assert!(!condition.abnormal, "{condition:?}");
    let e = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "vol-1".into(),
            volume_path: p.target("elsewhere").to_string_lossy().into(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    // Other arguments at the same path: AlreadyExists.
    let mut other = req.clone();
    other
        .volume_context
        .insert("shuffle".into(), "false".into());
    let err = node.node_publish_volume(other).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    // Unpublish: unmounted, the daemon gone, the target path and the pod's cache removed;
    // and again: success.
    node.node_unpublish_volume(unpublish("vol-1", &target))
        .await
        .unwrap();
    assert!(!is_mounted(&target));
    assert!(!target.exists(), "the target path stays behind");
    assert!(!alive(pid), "the daemon still runs");
    assert!(
        caches(&p).is_empty(),
        "the inline volume's cache stays behind: {:?}",
        caches(&p)
    );
    node.node_unpublish_volume(unpublish("vol-1", &target))
        .await
        .unwrap();
}

/// Inline volumes are refused unless the operator allows them; then only with their own
/// credentials, and never naming the node (a path, a port, a loopback or metadata address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_inline_volumes_are_off_by_default_and_may_not_name_the_node() {
    let dataset = fixtures().join("mds/basic");
    let secret = ctx(&[
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
    ]);
    let s3 = || {
        ctx(&[
            ("source", "s3://bucket/ds"),
            ("endpointUrl", "http://minio.storage.svc:9000"),
        ])
    };
    let refused = |r: Result<tonic::Response<NodePublishVolumeResponse>, tonic::Status>,
                   says: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(says), "{says:?} not in {e:?}");
    };
    let p = Plugin::start();
    let mut node = p.node().await;
    let target = p.target("pod-inline");
    let mut req = publish_inline("csi-abc", &target, s3());
    req.secrets = secret.clone();
    refused(node.node_publish_volume(req).await, "turned off");
    // Also when kubelet passes no pod info: an empty staging path is an inline volume.
    let mut req = publish_inline("csi-abc", &target, s3());
    req.volume_context.remove("csi.storage.k8s.io/ephemeral");
    refused(node.node_publish_volume(req).await, "turned off");
    assert!(!is_mounted(&target) && caches(&p).is_empty());
    drop(node);
    drop(p);

    let p = Plugin::start_args(&["--inline-volumes", "own-credentials"]);
    let mut node = p.node().await;
    refused(
        node.node_publish_volume(publish_inline("csi-abc", &target, s3()))
            .await,
        "own credentials",
    );
    let with = |pairs: &[(&str, &str)]| {
        let mut c = s3();
        for (k, v) in pairs {
            c.insert(k.to_string(), v.to_string());
        }
        let mut r = publish_inline("csi-abc", &p.target("pod-inline"), c);
        r.secrets = secret.clone();
        r
    };
    refused(
        node.node_publish_volume(with(&[("source", dataset.to_str().unwrap())]))
            .await,
        "not a path of the node",
    );
    refused(
        node.node_publish_volume(with(&[("metricsAddr", "0.0.0.0:9100")]))
            .await,
        "metrics-addr",
    );
    refused(
        node.node_publish_volume(with(&[("resumeState", "/etc/shadow")]))
            .await,
        "resume-state",
    );
    for endpoint in [
        "http://169.254.169.254",
        "http://127.0.0.1:9000",
        "http://localhost:9000",
    ] {
        refused(
            node.node_publish_volume(with(&[("endpointUrl", endpoint)]))
                .await,
            "loopback and link-local",
        );
    }
    assert!(caches(&p).is_empty());
    // A PersistentVolume (an administrator's) may still name a folder of the node.
    let pv_target = p.target("pod-pv");
    node.node_publish_volume(publish(
        "pv-local",
        &pv_target,
        ctx(&[("source", dataset.to_str().unwrap())]),
    ))
    .await
    .unwrap();
    check_reads(&pv_target, &dataset);
    node.node_unpublish_volume(unpublish("pv-local", &pv_target))
        .await
        .unwrap();
}

/// The node's cache budget: volumes' cacheLimits add up to at most --cache-budget; a volume
/// that does not fit is refused with ResourceExhausted until another is unstaged, and the
/// caches no mounted volume uses are removed to make room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_cache_limits_add_up_to_the_node_budget() {
    let p = Plugin::start_args(&["--cache-budget", "1MiB", "--default-cache-limit", "100%"]);
    let mut node = p.node().await;
    let dataset = fixtures().join("mds/basic");
    let stage = |pv: &str, limit: Option<&str>| {
        let mut context = ctx(&[("source", dataset.to_str().unwrap())]);
        if let Some(l) = limit {
            context.insert("cacheLimit".into(), l.into());
        }
        NodeStageVolumeRequest {
            volume_id: pv.into(),
            staging_target_path: p.staging(pv).to_string_lossy().into(),
            volume_capability: mount_cap(),
            volume_context: context,
            ..Default::default()
        }
    };
    let unstage = |pv: &str| NodeUnstageVolumeRequest {
        volume_id: pv.into(),
        staging_target_path: p.staging(pv).to_string_lossy().into(),
    };
    node.node_stage_volume(stage("pv-a", Some("600KiB")))
        .await
        .unwrap();
    // Read every sample, so pv-a's cache holds shards on disk.
    check_reads(&p.staging("pv-a"), &dataset);
    let e = node
        .node_stage_volume(stage("pv-b", Some("600KiB")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("cache budget"), "{e:?}");
    // Without a cacheLimit, a volume gets the default, which never exceeds the budget.
    let e = node
        .node_stage_volume(stage("pv-b", None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(!is_mounted(&p.staging("pv-b")));
    node.node_unstage_volume(unstage("pv-a")).await.unwrap();
    // pv-a's cache stays for a later mount of pv-a, but it is idle: pv-b's limit plus that
    // cache exceed the budget, so it is removed to make room.
    let idle = caches(&p);
    assert_eq!(idle.len(), 1, "{idle:?}");
    assert!(
        shardfs::csi::cache_budget::disk_usage(&idle[0]) > 80 << 10,
        "pv-a cached nothing"
    );
    node.node_stage_volume(stage("pv-b", Some("950KiB")))
        .await
        .unwrap();
    assert!(!idle[0].exists(), "the idle cache of pv-a is still there");
    let pid = daemon_pid(&p.staging("pv-b"));
    assert!(cmdline(pid).contains(&"--cache-limit=950KiB".to_string()));
    node.node_unstage_volume(unstage("pv-b")).await.unwrap();
    node.node_stage_volume(stage("pv-c", None)).await.unwrap();
    let pid = daemon_pid(&p.staging("pv-c"));
    assert!(
        cmdline(pid).contains(&format!("--cache-limit={}", 1u64 << 20)),
        "{:?}",
        cmdline(pid)
    );
    node.node_unstage_volume(unstage("pv-c")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_errors_follow_the_spec() {
    let p = Plugin::start();
    let mut node = p.node().await;
    let dataset = fixtures().join("mds/basic");
    let target = p.target("pod-err");
    let good = ctx(&[("source", dataset.to_str().unwrap())]);
    let code_and_msg = |r: Result<tonic::Response<NodePublishVolumeResponse>, tonic::Status>| {
        let e = r.unwrap_err();
        (e.code(), e.message().to_string())
    };
    // Missing fields are reported in the order volume id, target path, capability.
    let (code, msg) = code_and_msg(
        node.node_publish_volume(NodePublishVolumeRequest::default())
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("volume id"), "{msg}");
    let (code, msg) = code_and_msg(
        node.node_publish_volume(NodePublishVolumeRequest {
            volume_id: "v".into(),
            ..Default::default()
        })
        .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("target path"), "{msg}");
    let mut no_cap = publish("v", &target, good.clone());
    no_cap.volume_capability = None;
    let (code, msg) = code_and_msg(node.node_publish_volume(no_cap).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("capability"), "{msg}");
    // No source; an unknown attribute; an option the plugin owns; a block volume.
    let (code, msg) = code_and_msg(
        node.node_publish_volume(publish("v", &target, ctx(&[("shuffle", "true")])))
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("`source`"), "{msg}");
    let mut unknown = good.clone();
    unknown.insert("colourScheme".into(), "dark".into());
    let (code, msg) = code_and_msg(
        node.node_publish_volume(publish("v", &target, unknown))
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("colourScheme"), "{msg}");
    let mut owned = good.clone();
    owned.insert("cacheDir".into(), "/etc".into());
    let (code, _) = code_and_msg(node.node_publish_volume(publish("v", &target, owned)).await);
    assert_eq!(code, Code::InvalidArgument);
    let mut block = publish("v", &target, good.clone());
    block.volume_capability = Some(VolumeCapability {
        access_type: Some(AccessType::Block(Default::default())),
        access_mode: None,
    });
    let (code, msg) = code_and_msg(node.node_publish_volume(block).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("block"), "{msg}");
    // A dataset that is not there: a clear error, quickly, and nothing left mounted.
    let started = Instant::now();
    let missing = p.root.join("no-such-dataset");
    let (code, msg) = code_and_msg(
        node.node_publish_volume(publish(
            "v",
            &target,
            ctx(&[("source", missing.to_str().unwrap())]),
        ))
        .await,
    );
    assert_eq!(code, Code::Internal);
    assert!(msg.contains("index.json"), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(!is_mounted(&target));
    // Unpublish and unstage of what was never there: success. Missing fields: InvalidArgument.
    node.node_unpublish_volume(unpublish("v", &p.target("never")))
        .await
        .unwrap();
    let e = node
        .node_unpublish_volume(unpublish("", &target))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = node
        .node_unpublish_volume(unpublish("v", Path::new("")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    node.node_unstage_volume(NodeUnstageVolumeRequest {
        volume_id: "v".into(),
        staging_target_path: p.staging("never").to_string_lossy().into(),
    })
    .await
    .unwrap();
    let e = node
        .node_stage_volume(NodeStageVolumeRequest {
            volume_id: "v".into(),
            staging_target_path: p.staging("pv").to_string_lossy().into(),
            volume_capability: None,
            volume_context: good,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("capability"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_staged_volume_is_one_mount_shared_by_every_pod() {
    let p = Plugin::start();
    let mut node = p.node().await;
    let dataset = fixtures().join("mds/compressed-zstd");
    let staging = p.staging("pv-imagenet");
    let stage = NodeStageVolumeRequest {
        volume_id: "pv-imagenet".into(),
        staging_target_path: staging.to_string_lossy().into(),
        volume_capability: mount_cap(),
        volume_context: ctx(&[("source", dataset.to_str().unwrap())]),
        // A PV's mountOptions arrive as mount flags: `-o` keys and generic options.
        ..Default::default()
    };
    let mut stage_with_options = stage.clone();
    if let Some(VolumeCapability {
        access_type: Some(AccessType::Mount(m)),
        ..
    }) = stage_with_options.volume_capability.as_mut()
    {
        m.mount_flags = vec!["noatime".into(), "cache_limit=64MiB".into()];
    }
    node.node_stage_volume(stage_with_options.clone())
        .await
        .unwrap();
    node.node_stage_volume(stage_with_options.clone())
        .await
        .unwrap();
    // The same volume staged with other options: AlreadyExists.
    let e = node.node_stage_volume(stage.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    let pid = daemon_pid(&staging);
    let (t1, t2) = (p.target("pod-a"), p.target("pod-b"));
    for t in [&t1, &t2] {
        let mut req = publish("pv-imagenet", t, HashMap::new());
        req.staging_target_path = staging.to_string_lossy().into();
        node.node_publish_volume(req.clone()).await.unwrap();
        node.node_publish_volume(req).await.unwrap();
        check_reads(t, &dataset);
        assert_eq!(daemon_pid(t), pid, "one daemon serves every pod");
    }
    for t in [&t1, &t2] {
        node.node_unpublish_volume(unpublish("pv-imagenet", t))
            .await
            .unwrap();
        assert!(!is_mounted(t) && !t.exists());
    }
    assert!(
        alive(pid),
        "unpublishing the pods must not stop the staged mount"
    );
    let unstage = NodeUnstageVolumeRequest {
        volume_id: "pv-imagenet".into(),
        staging_target_path: staging.to_string_lossy().into(),
    };
    node.node_unstage_volume(unstage.clone()).await.unwrap();
    assert!(!is_mounted(&staging));
    assert!(!alive(pid));
    node.node_unstage_volume(unstage).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_mounts_survive_a_killed_plugin_and_a_new_one_unpublishes_them() {
    let mut p = Plugin::start();
    let dataset = fixtures().join("mds/basic");
    let target = p.target("pod-survivor");
    let context = ctx(&[("source", dataset.to_str().unwrap()), ("shuffle", "true")]);
    let mut node = p.node().await;
    node.node_publish_volume(publish("vol-s", &target, context.clone()))
        .await
        .unwrap();
    let pid = daemon_pid(&target);
    drop(node);
    p.kill_group();
    // The training pod keeps reading while the plugin is gone.
    check_reads(&target, &dataset);
    assert!(alive(pid));
    // A new plugin process re-adopts the mount: a repeated publish changes nothing...
    p.spawn();
    let mut node = p.node().await;
    node.node_publish_volume(publish("vol-s", &target, context))
        .await
        .unwrap();
    assert_eq!(daemon_pid(&target), pid);
    assert!(p.log().contains("re-adopted"), "{}", p.log());
    // ...and unpublish cleans everything up.
    node.node_unpublish_volume(unpublish("vol-s", &target))
        .await
        .unwrap();
    assert!(!is_mounted(&target));
    assert!(!alive(pid));
}

/// A plugin in a container: its daemons live in a cgroup of the host, so stopping the
/// container (every process of its cgroup killed) leaves the volume serving, and a plugin in a
/// new container unstages it. The control: without --host-cgroupfs the daemon dies with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_staged_volume_survives_a_stopped_plugin_container() {
    let dataset = fixtures().join("mds/basic");
    let context = ctx(&[("source", dataset.to_str().unwrap()), ("shuffle", "true")]);
    for escape in [true, false] {
        let daemons = escape.then(|| unique_name("daemons"));
        // With the escape, limits on the daemons' cgroup: 1 GiB of memory, half a CPU share.
        let limits: &[&str] = if escape {
            &["--daemon-memory-max", "1GiB", "--daemon-cpu-weight", "50"]
        } else {
            &[]
        };
        let mut p = Plugin::start_full(Some(Container::new(daemons.clone())), limits);
        if let Some(name) = &daemons {
            let (mut memory, mut cpu) = (Vec::new(), Vec::new());
            for h in cgroup_hierarchies() {
                let dir = h.join(name);
                for file in [
                    "memory.max",
                    "memory.limit_in_bytes",
                    "cpu.weight",
                    "cpu.shares",
                ] {
                    if let Ok(v) = std::fs::read_to_string(dir.join(file)) {
                        let into = if file.starts_with("memory") {
                            &mut memory
                        } else {
                            &mut cpu
                        };
                        into.push(format!("{file}={}", v.trim()));
                    }
                }
            }
            assert!(
                memory == ["memory.max=1073741824"]
                    || memory == ["memory.limit_in_bytes=1073741824"],
                "{memory:?}: {}",
                p.log()
            );
            assert!(
                cpu == ["cpu.weight=50"] || cpu == ["cpu.shares=512"],
                "{cpu:?}: {}",
                p.log()
            );
        }
        let staging = p.staging("pv-ctr");
        let target = p.target("pod-ctr");
        let mut node = p.node().await;
        let stage = NodeStageVolumeRequest {
            volume_id: "pv-ctr".into(),
            staging_target_path: staging.to_string_lossy().into(),
            volume_capability: mount_cap(),
            volume_context: context.clone(),
            ..Default::default()
        };
        node.node_stage_volume(stage.clone()).await.unwrap();
        let mut req = publish("pv-ctr", &target, context.clone());
        req.staging_target_path = staging.to_string_lossy().into();
        node.node_publish_volume(req.clone()).await.unwrap();
        let pid = daemon_pid(&target);
        let in_container = p.container.as_ref().unwrap().pids();
        assert_eq!(
            in_container.contains(&(pid as i32)),
            !escape,
            "daemon {pid} vs container pids {in_container:?}: {}",
            p.log()
        );
        drop(node);
        p.kill_group();
        if !escape {
            assert!(!alive(pid), "the control daemon survived its container");
            continue;
        }
        assert!(alive(pid), "{}", p.log());
        check_reads(&target, &dataset);
        // A new container with a new plugin: publish again (re-adopted), then tear down.
        drop(p.container.replace(Container::new(daemons.clone())));
        p.spawn();
        let mut node = p.node().await;
        node.node_stage_volume(stage.clone()).await.unwrap();
        node.node_publish_volume(req).await.unwrap();
        assert_eq!(daemon_pid(&target), pid);
        node.node_unpublish_volume(unpublish("pv-ctr", &target))
            .await
            .unwrap();
        node.node_unstage_volume(NodeUnstageVolumeRequest {
            volume_id: "pv-ctr".into(),
            staging_target_path: staging.to_string_lossy().into(),
        })
        .await
        .unwrap();
        assert!(!is_mounted(&staging));
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(pid) {
            assert!(
                Instant::now() < deadline,
                "daemon {pid} outlived its unstage"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        for h in cgroup_hierarchies() {
            std::fs::remove_dir(h.join(daemons.as_deref().unwrap())).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_s3_volume_with_a_secret_reads_through_moto() {
    let moto = crate::common::moto::moto();
    let dataset = fixtures().join("mds/basic");
    moto.upload_dir("csi-tests", "ds/basic", &dataset);
    let p = Plugin::start();
    let mut node = p.node().await;
    let target = p.target("pod-s3");
    let mut req = publish(
        "vol-s3",
        &target,
        ctx(&[
            ("source", "s3://csi-tests/ds/basic"),
            ("endpointUrl", &moto.endpoint),
            ("region", "us-east-1"),
        ]),
    );
    req.secrets = ctx(&[
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
    ]);
    node.node_publish_volume(req.clone()).await.unwrap();
    check_reads(&target, &dataset);
    node.node_unpublish_volume(unpublish("vol-s3", &target))
        .await
        .unwrap();
    // A prefix without index.json: a clear error naming it, not a hung mount.
    let mut missing = req.clone();
    missing
        .volume_context
        .insert("source".into(), "s3://csi-tests/ds/nothing-here".into());
    let e = node.node_publish_volume(missing).await.unwrap_err();
    assert_eq!(e.code(), Code::Internal);
    assert!(e.message().contains("index.json"), "{e:?}");
    // The secret's values never appear in the plugin's log.
    assert!(!p.log().contains("AWS_SECRET_ACCESS_KEY=test"));
}

/// Issue 38: a Python gRPC client with default options is served. On a unix socket grpc-core
/// derives `:authority` from the socket path (`tmp%2F…%2Fcsi.sock`), which the HTTP/2 layer
/// rejects as an authority; Go's clients (kubelet's) send `localhost`. Several calls on one
/// channel also reuse the HPACK dynamic table entry the first one added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_answers_a_python_grpc_client_with_default_options() {
    let p = Plugin::start();
    // The plugin answers (a Rust client waits for the socket).
    drop(p.channel().await);
    let py = crate::common::python_with_numpy();
    let script = r#"
import sys, grpc
channel = grpc.insecure_channel("unix://" + sys.argv[1])
raw = lambda b: b
info = channel.unary_unary("/csi.v1.Identity/GetPluginInfo", request_serializer=raw,
                           response_deserializer=raw)
probe = channel.unary_unary("/csi.v1.Identity/Probe", request_serializer=raw,
                            response_deserializer=raw)
for _ in range(3):
    assert b"csi.shardfs.dev" in info(b"", timeout=10)
    probe(b"", timeout=10)
print("ok")
"#;
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(p.socket())
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "the Python client failed (grpcio is in the venv tests/run.sh prepares): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pod's network, as a CNI plugin makes it: a network namespace with a veth pair to the
/// host, routed to the host; and an address on the host's loopback device where the store
/// listens, which the host reaches directly and the pod through its veth. Deleting it (CNI
/// DEL) removes the veth, so whatever is left in the namespace loses the store.
struct PodNetwork {
    netns: String,
    host_veth: String,
    store_ip: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("the network test needs iproute2's `ip` (apt-get install iproute2): {e}")
    });
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PodNetwork {
    fn new() -> PodNetwork {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (std::process::id() % 200) * 4 + n % 4;
        let (a, b) = (id / 250, id % 250);
        let net = PodNetwork {
            netns: format!("shardfs-test-{}-{n}", std::process::id()),
            host_veth: format!("sfh{}", id),
            store_ip: format!("10.213.{a}.{}", b + 1),
        };
        let pod_veth = format!("sfc{id}");
        let (host_ip, pod_ip) = (format!("10.214.{a}.{b}"), format!("10.215.{a}.{b}"));
        ip(&["netns", "add", &net.netns]);
        ip(&["addr", "add", &format!("{}/32", net.store_ip), "dev", "lo"]);
        ip(&[
            "link",
            "add",
            &net.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &pod_veth,
            "netns",
            &net.netns,
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{host_ip}/32"),
            "dev",
            &net.host_veth,
        ]);
        ip(&["link", "set", &net.host_veth, "up"]);
        ip(&[
            "route",
            "add",
            &format!("{pod_ip}/32"),
            "dev",
            &net.host_veth,
        ]);
        let ns = |args: &[&str]| {
            let mut all = vec!["-n", net.netns.as_str()];
            all.extend_from_slice(args);
            ip(&all);
        };
        ns(&["link", "set", "lo", "up"]);
        ns(&["addr", "add", &format!("{pod_ip}/32"), "dev", &pod_veth]);
        ns(&["link", "set", &pod_veth, "up"]);
        ns(&["route", "add", &format!("{host_ip}/32"), "dev", &pod_veth]);
        ns(&["route", "add", "default", "via", &host_ip, "dev", &pod_veth]);
        net
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.netns))
    }

    /// What the CNI plugin does when the pod is deleted.
    fn delete(&self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_veth])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        self.delete();
        let _ = Command::new("ip")
            .args(["addr", "del", &format!("{}/32", self.store_ip), "dev", "lo"])
            .output();
    }
}

/// The plugin runs as a pod with a network of its own; its daemons start in the host's
/// network namespace, so after the pod is deleted (its processes killed, its veth removed)
/// the volume still reads shards it had not cached, from a store the host reaches. The
/// control (daemons left in the pod's namespace) loses the store with the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_daemons_keep_their_network_when_the_plugin_pod_is_deleted() {
    let dataset = fixtures().join("mds/basic");
    let shards: Vec<String> = (0..4).map(|i| format!("ds/shard.0000{i}.mds")).collect();
    for escape in [true, false] {
        let net = PodNetwork::new();
        let store = shardfs_testkit::s3::FakeS3::start_at(
            &net.store_ip,
            shardfs_testkit::s3::EtagMode::Opaque,
        );
        store.put_dir("net", "ds", &dataset);
        let daemons = unique_name("daemons");
        let mut container = Container::new(Some(daemons.clone()));
        container.netns = Some(net.path());
        // The control names the plugin's own namespace as the "host's": daemons stay in it.
        let own_ns = "/proc/self/ns/net";
        let args: &[&str] = if escape {
            &[]
        } else {
            &["--host-network-namespace", own_ns]
        };
        let mut p = Plugin::start_full(Some(container), args);
        let mut node = p.node().await;
        let target = p.target("pod-net");
        let mut req = publish(
            "pv-net",
            &target,
            ctx(&[
                ("source", "s3://net/ds"),
                ("endpointUrl", &store.endpoint),
                ("region", "us-east-1"),
                // Room for about one shard, so reading the whole epoch fetches again.
                ("cacheLimit", "40KiB"),
                ("memoryLimit", "64KiB"),
                ("stallTimeout", "5"),
            ]),
        );
        req.secrets = ctx(&[
            ("AWS_ACCESS_KEY_ID", shardfs_testkit::s3::ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", shardfs_testkit::s3::SECRET_KEY),
        ]);
        node.node_publish_volume(req).await.unwrap_or_else(|e| {
            panic!("publish: {e:?}\n{}", p.log());
        });
        let pid = daemon_pid(&target);
        let daemon_net = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
        let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
        assert_eq!(daemon_net == host_net, escape, "{}", p.log());
        drop(node);
        // The pod is deleted: its processes killed, then its network torn down.
        p.kill_group();
        net.delete();
        assert!(alive(pid));
        let before: u64 = shards
            .iter()
            .map(|k| {
                let s = store.seen(k);
                s.gets + s.range_gets
            })
            .sum();
        let mut read = 0usize;
        let mut failed = None;
        for epoch in ["epoch-0", "epoch-1"] {
            for e in std::fs::read_dir(target.join("rank-0").join(epoch)).unwrap() {
                match std::fs::read(e.unwrap().path()) {
                    Ok(d) => read += d.len(),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
        }
        let after: u64 = shards
            .iter()
            .map(|k| {
                let s = store.seen(k);
                s.gets + s.range_gets
            })
            .sum();
        if escape {
            assert!(failed.is_none(), "{failed:?}: {}", p.log());
            assert!(
                after > before,
                "no shard was fetched after the pod went ({before} GETs before, {after} after): the test proves nothing"
            );
            assert!(read > 0);
            let mut node = {
                let mut c = Container::new(Some(daemons.clone()));
                c.netns = None;
                drop(p.container.replace(c));
                p.spawn();
                p.node().await
            };
            node.node_unpublish_volume(unpublish("pv-net", &target))
                .await
                .unwrap();
        } else {
            let e = failed.expect("the control read every file without its network");
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
            mounter_detach(&target);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(pid) && !escape {
            // SAFETY: the control's daemon, started by this test's plugin.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(p);
        for h in cgroup_hierarchies() {
            let _ = std::fs::remove_dir(h.join(&daemons));
        }
    }
}

fn mounter_detach(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a valid path string.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

/// moto's STS behind the TLS front of tests/kubernetes/sts_proxy.py, which records the tokens
/// it is called with; stopped on drop.
struct StsFront {
    child: Child,
    endpoint: String,
    tokens: PathBuf,
    _dir: tempfile::TempDir,
}

impl StsFront {
    fn start(moto: &str) -> StsFront {
        let dir = tempfile::tempdir().unwrap();
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let tokens = dir.path().join("tokens");
        let port_file = dir.path().join("port");
        let child = Command::new(crate::common::moto::python())
            .arg(root.join("tests/kubernetes/sts_proxy.py"))
            .arg(moto)
            .arg(root.join("tests/tls"))
            .arg(&tokens)
            .arg(&port_file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !port_file.exists() {
            assert!(
                Instant::now() < deadline,
                "the STS front did not start: {}",
                std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let port = std::fs::read_to_string(&port_file).unwrap();
        StsFront {
            child,
            endpoint: format!("https://127.0.0.1:{}", port.trim()),
            tokens,
            _dir: dir,
        }
    }

    /// The tokens STS was called with, in order.
    fn tokens(&self) -> Vec<String> {
        std::fs::read_to_string(&self.tokens)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for StsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn environ(pid: u64) -> HashMap<String, String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// The tokens kubelet passes with `tokenRequests`.
fn sa_tokens(token: &str) -> String {
    serde_json::json!({
        "sts.amazonaws.com": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}
    })
    .to_string()
}

/// Per-pod identity: an inline volume with `authenticationSource: pod` mounts with the pod's
/// service-account token exchanged at STS (moto, over TLS) for the role's credentials, none of
/// the plugin's own credentials reach the daemon, and a republish with a new token makes the
/// daemon's next STS call use the new token. A PV with the pod's identity is not staged: each
/// pod gets its own mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_pod_identity_uses_the_pods_token_and_its_refresh() {
    let moto = crate::common::moto::moto();
    let dataset = fixtures().join("mds/basic");
    moto.upload_dir("csi-irsa", "ds/basic", &dataset);
    let sts = StsFront::start(&moto.endpoint);
    let ca = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tls/ca.pem");
    let p = Plugin::start_env(
        None,
        &[
            "--inline-volumes",
            "own-credentials",
            "--inline-allow-host",
            "127.0.0.1",
        ],
        &[
            ("AWS_ENDPOINT_URL_STS", &sts.endpoint),
            ("SSL_CERT_FILE", ca.to_str().unwrap()),
            // The plugin's own identity, which the pod's volume must not get.
            ("AWS_ACCESS_KEY_ID", "plugin-key"),
            ("AWS_SECRET_ACCESS_KEY", "plugin-secret"),
        ],
    );
    let mut node = p.node().await;
    let target = p.target("pod-irsa");
    let role = "arn:aws:iam::123456789012:role/dataset-reader";
    let context = |token: &str| {
        ctx(&[
            ("source", "s3://csi-irsa/ds/basic"),
            ("endpointUrl", &moto.endpoint),
            ("region", "us-east-1"),
            ("authenticationSource", "pod"),
            ("awsRoleArn", role),
            ("cacheLimit", "40KiB"),
            ("memoryLimit", "64KiB"),
            ("csi.storage.k8s.io/pod.name", "bert-worker-0"),
            (
                "csi.storage.k8s.io/serviceAccount.tokens",
                &sa_tokens(token),
            ),
        ])
    };
    node.node_publish_volume(publish_inline("csi-irsa", &target, context("token-one")))
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", p.log()));
    check_reads(&target, &dataset);
    assert_eq!(sts.tokens().first().map(String::as_str), Some("token-one"));
    let pid = daemon_pid(&target);
    let env = environ(pid);
    assert_eq!(env.get("AWS_ROLE_ARN").map(String::as_str), Some(role));
    assert!(!env.contains_key("AWS_ACCESS_KEY_ID"), "{env:?}");
    assert!(!env.contains_key("AWS_SECRET_ACCESS_KEY"), "{env:?}");
    let token_file = PathBuf::from(&env["AWS_WEB_IDENTITY_TOKEN_FILE"]);
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), "token-one");
    // kubelet republishes (requiresRepublish) with a fresh token: same mount, new token file.
    node.node_publish_volume(publish_inline("csi-irsa", &target, context("token-two")))
        .await
        .unwrap();
    assert_eq!(daemon_pid(&target), pid);
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), "token-two");
    // The credentials near expiry (the STS front says so), so the next fetch from the store
    // exchanges the token again: the new one.
    // The kernel keeps the pages read above (and a sample is one inode in every epoch):
    // dropped, so the reads reach the daemon, whose caches cannot hold the whole dataset.
    std::thread::sleep(Duration::from_millis(1500));
    for epoch in ["epoch-0", "epoch-1"] {
        for e in std::fs::read_dir(target.join("rank-0").join(epoch)).unwrap() {
            let path = e.unwrap().path();
            crate::mount::drop_cached_pages(&path);
            std::fs::read(path).unwrap();
        }
    }
    let seen = sts.tokens();
    assert_eq!(
        seen.last().map(String::as_str),
        Some("token-two"),
        "STS calls: {seen:?}"
    );
    node.node_unpublish_volume(unpublish("csi-irsa", &target))
        .await
        .unwrap();
    assert!(!token_file.exists(), "the pod's token stays on the node");
    assert!(caches(&p).is_empty(), "{:?}", caches(&p));
    // A PV with the pod's identity: stage mounts nothing; publish mounts per pod.
    let staging = p.staging("pv-irsa");
    node.node_stage_volume(NodeStageVolumeRequest {
        volume_id: "pv-irsa".into(),
        staging_target_path: staging.to_string_lossy().into(),
        volume_capability: mount_cap(),
        volume_context: context(""),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(!is_mounted(&staging));
    let mut req = publish("pv-irsa", &target, context("token-three"));
    req.staging_target_path = staging.to_string_lossy().into();
    node.node_publish_volume(req).await.unwrap();
    assert!(is_mounted(&target));
    assert_eq!(sts.tokens().last().map(String::as_str), Some("token-three"));
    node.node_unpublish_volume(unpublish("pv-irsa", &target))
        .await
        .unwrap();
}
