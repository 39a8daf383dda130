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

    /// A plugin inside an emulated container; with `daemon_cgroup` it gets --host-cgroupfs.
    fn start_in_container(daemon_cgroup: Option<String>) -> Plugin {
        Plugin::start_with(Some(Container::new(daemon_cgroup)))
    }

    fn start_with(container: Option<Container>) -> Plugin {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let mut p = Plugin {
            child: None,
            root,
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
            .env_remove("AWS_CA_BUNDLE")
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
                    // PID 1 stands for the host in a cluster; here the test's namespace does.
                    .arg("--host-cgroup-namespace")
                    .arg(format!("/proc/{}/ns/cgroup", std::process::id()));
            }
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

fn publish(
    volume: &str,
    target: &Path,
    context: HashMap<String, String>,
) -> NodePublishVolumeRequest {
    NodePublishVolumeRequest {
        volume_id: volume.into(),
        target_path: target.to_string_lossy().into(),
        volume_capability: mount_cap(),
        readonly: false,
        volume_context: context,
        ..Default::default()
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_inline_volume_publishes_reads_and_unpublishes_idempotently() {
    let p = Plugin::start();
    let mut node = p.node().await;
    let dataset = fixtures().join("mds/basic");
    let target = p.target("pod-1");
    let context = ctx(&[
        ("source", dataset.to_str().unwrap()),
        ("shuffle", "true"),
        ("ranksPerNode", "2"),
        ("csi.storage.k8s.io/ephemeral", "true"),
        ("csi.storage.k8s.io/pod.name", "train-0"),
    ]);
    node.node_publish_volume(publish("vol-1", &target, context.clone()))
        .await
        .unwrap();
    assert!(is_mounted(&target));
    check_reads(&target, &dataset);
    assert!(target.join("rank-1/epoch-0").is_dir());
    let pid = daemon_pid(&target);
    // The same request again: success, nothing new mounted.
    node.node_publish_volume(publish("vol-1", &target, context.clone()))
        .await
        .unwrap();
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
    let mut other = context.clone();
    other.insert("shuffle".into(), "false".into());
    let err = node
        .node_publish_volume(publish("vol-1", &target, other))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    // Unpublish: unmounted, the daemon gone, the target path removed; and again: success.
    node.node_unpublish_volume(unpublish("vol-1", &target))
        .await
        .unwrap();
    assert!(!is_mounted(&target));
    assert!(!target.exists(), "the target path stays behind");
    assert!(!alive(pid), "the daemon still runs");
    node.node_unpublish_volume(unpublish("vol-1", &target))
        .await
        .unwrap();
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
        let mut p = Plugin::start_in_container(daemons.clone());
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
