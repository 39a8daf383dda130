//! The CSI Node service: stage a dataset once per node (one `shardfs mount`, one cache), publish
//! it into each pod with a read-only bind mount, or mount an inline (ephemeral) volume straight
//! at the pod's target path.
//!
//! Follows the CSI spec's rules: required fields are checked first, in the order volume id,
//! path, capability; repeating a call with the same arguments succeeds, a different request at
//! a path already in use is AlreadyExists; unpublishing or unstaging what is not there succeeds.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::Mutex;
use tonic::{Request, Response, Status};

use super::attributes::{self, MountRequest};
use super::cache_budget::{self, CacheBudget};
use super::inline::{self, InlinePolicy};
use super::mounter::{self, MountError, Mounter};
use super::pod_identity::{self, PodIdentity};
use super::proto::node_server::Node;
use super::proto::node_service_capability::{rpc, Rpc};
use super::proto::volume_capability::AccessType;
use super::proto::*;
use super::state::{MountKind, Record, StateDir};

/// The Node service of one plugin process.
#[derive(Debug, Clone)]
pub struct NodeService {
    /// This node's id (NodeGetInfo).
    pub node_id: String,
    /// Per-volume cache folders are made under this one.
    pub cache_root: PathBuf,
    /// The long options `shardfs mount` accepts (validates volume attributes).
    pub known_flags: Arc<Vec<String>>,
    /// Runs the mounts.
    pub mounter: Mounter,
    /// What is mounted where.
    pub state: StateDir,
    /// One lock per path, so concurrent calls for the same path run one after the other.
    pub locks: Arc<std::sync::Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>>,
    /// Which inline (ephemeral) volumes are allowed.
    pub inline_policy: InlinePolicy,
    /// The node-wide budget of the caches under `cache_root`.
    pub budget: Arc<CacheBudget>,
    /// Pods' service-account tokens are written under this folder (the state dir).
    pub tokens_dir: PathBuf,
}

/// How a volume is mounted by a daemon of its own.
struct DaemonPlan {
    /// What `shardfs mount` runs with.
    req: MountRequest,
    /// The mount serves one pod only (an inline volume, or a pod's own credentials): its cache
    /// is its own and goes with its unpublish.
    per_pod: bool,
    /// The pod's credentials, written to the token file before the mount and at republish.
    identity: Option<PodIdentity>,
}

fn required<'a>(value: &'a str, what: &str) -> Result<&'a str, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{what} is required")));
    }
    Ok(value)
}

fn absolute(p: &str, what: &str) -> Result<PathBuf, Status> {
    let path = PathBuf::from(p);
    if !path.is_absolute()
        || path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(Status::invalid_argument(format!(
            "{what} must be an absolute path without `..`: {p:?}"
        )));
    }
    Ok(path)
}

/// Checks the capability: present, a filesystem (not a block device), any access mode.
fn mount_flags(cap: Option<&VolumeCapability>) -> Result<Vec<String>, Status> {
    let cap = cap.ok_or_else(|| Status::invalid_argument("volume capability is required"))?;
    match &cap.access_type {
        Some(AccessType::Mount(m)) => {
            if !m.fs_type.is_empty() && m.fs_type != "fuse.shardfs" && m.fs_type != "shardfs" {
                tracing::info!(fs_type = %m.fs_type, "ignoring the requested fs_type: shardfs volumes are fuse.shardfs");
            }
            Ok(m.mount_flags.clone())
        }
        Some(AccessType::Block(_)) => Err(Status::invalid_argument(
            "block volumes are not supported: shardfs volumes are read-only filesystems",
        )),
        None => Err(Status::invalid_argument(
            "volume capability has no access type (mount is required)",
        )),
    }
}

fn mount_status(e: MountError) -> Status {
    match e {
        MountError::Timeout(_) => Status::deadline_exceeded(e.to_string()),
        MountError::Failed(msg) => Status::internal(format!("shardfs mount failed: {msg}")),
        MountError::Io { .. } => Status::internal(e.to_string()),
    }
}

fn remove_cache(cache: &Path) {
    match std::fs::remove_dir_all(cache) {
        Ok(()) => tracing::info!(cache = %cache.display(), "removed the cache of a one-pod volume"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(cache = %cache.display(), error = %e, "cannot remove a volume's cache")
        }
    }
}

fn state_status(e: std::io::Error) -> Status {
    Status::internal(format!("cannot record the mount in the state dir: {e}"))
}

fn statvfs(path: &Path) -> std::io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: statvfs is plain data; c is a valid NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

impl NodeService {
    /// NotFound unless `volume_id` is staged or published at `path` by this plugin.
    fn published_at(&self, volume_id: &str, path: &Path) -> Result<(), Status> {
        match self.state.get(path) {
            Some(rec) if rec.volume_id == volume_id => Ok(()),
            _ => Err(Status::not_found(format!(
                "volume {volume_id} is not staged or published at {}",
                path.display()
            ))),
        }
    }

    async fn lock(&self, path: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let m = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.entry(path.to_path_buf()).or_default().clone()
        };
        m.lock_owned().await
    }

    /// The cache folder of a volume shared by the node's pods, or of one pod's mount at `path`.
    fn cache_dir(&self, volume_id: &str, per_pod: Option<&Path>) -> PathBuf {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(volume_id.as_bytes());
        if let Some(path) = per_pod {
            h.update([0]);
            h.update(path.as_os_str().as_encoded_bytes());
        }
        self.cache_root.join(hex::encode(&h.finalize()[..12]))
    }

    /// The cache folders and limits of the volumes mounted now.
    fn mounted_caches(&self) -> Vec<(PathBuf, u64)> {
        self.state
            .all()
            .into_iter()
            .filter(|r| r.kind == MountKind::Daemon)
            .map(|r| {
                r.cache
                    .unwrap_or_else(|| (self.cache_dir(&r.volume_id, None), 0))
            })
            .collect()
    }

    /// `flags` with a `--cache-limit` (the plugin's default when the volume gives none), and
    /// that limit in bytes.
    fn with_cache_limit(&self, flags: &[String]) -> Result<(Vec<String>, u64), Status> {
        let mut flags = flags.to_vec();
        let given = flags
            .iter()
            .find_map(|f| f.strip_prefix("--cache-limit="))
            .map(crate::size::parse_size);
        let limit = match given {
            Some(Ok(l)) => l,
            Some(Err(e)) => {
                return Err(Status::invalid_argument(
                    cache_budget::BudgetError::BadLimit(e).to_string(),
                ))
            }
            None => {
                let l = self.budget.default_limit;
                flags.push(format!("--cache-limit={l}"));
                l
            }
        };
        Ok((flags, limit))
    }

    /// The plan of a volume mounted straight at `target` (not bound from a staged mount).
    fn direct_plan(
        &self,
        target: &Path,
        context: &HashMap<String, String>,
        flags: &[String],
        secrets: &HashMap<String, String>,
        inline: bool,
    ) -> Result<DaemonPlan, Status> {
        let mut req = self.request(context, flags, secrets)?;
        let identity = PodIdentity::from_context(context, secrets)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if inline {
            let own = identity.is_some() || !secrets.is_empty();
            inline::check(&self.inline_policy, &req, own)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
        }
        if let Some(id) = &identity {
            req.env
                .extend(id.env(&pod_identity::token_file(&self.tokens_dir, target)));
        }
        Ok(DaemonPlan {
            req,
            per_pod: inline || identity.is_some(),
            identity,
        })
    }

    fn request(
        &self,
        context: &HashMap<String, String>,
        flags: &[String],
        secrets: &HashMap<String, String>,
    ) -> Result<MountRequest, Status> {
        attributes::mount_request(context, flags, secrets, &self.known_flags)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }

    /// Mounts `plan` at `path` with a daemon unless the same request is mounted there already
    /// (then only a pod's refreshed token is written).
    async fn ensure_daemon(
        &self,
        volume_id: &str,
        path: &Path,
        plan: &DaemonPlan,
    ) -> Result<(), Status> {
        let req = &plan.req;
        let digest = req.digest();
        let existing = self.state.get(path);
        if let Some(rec) = &existing {
            if rec.volume_id != volume_id || rec.digest != digest {
                return Err(Status::already_exists(format!(
                    "{} already holds volume {} mounted with other arguments",
                    path.display(),
                    rec.volume_id
                )));
            }
        }
        if let Some(id) = &plan.identity {
            // At every publish: kubelet republishes (requiresRepublish) with a fresh token.
            let file = pod_identity::token_file(&self.tokens_dir, path);
            id.write_token(&file).map_err(|e| {
                Status::internal(format!(
                    "cannot write the pod's token to {}: {e}",
                    file.display()
                ))
            })?;
        }
        if existing.is_some() {
            if mounter::is_mountpoint(path) && mounter::answers(path) {
                return Ok(());
            }
            // The daemon died (node reboot, OOM): clear what is left and mount again.
            tracing::warn!(path = %path.display(), "recorded mount is gone; mounting again");
            if mounter::is_mountpoint(path) {
                mounter::detach(path, libc::MNT_DETACH).map_err(mount_status)?;
            }
        } else if mounter::is_mountpoint(path) {
            return Err(Status::already_exists(format!(
                "{} is already a mount point this plugin did not make",
                path.display()
            )));
        }
        std::fs::create_dir_all(path)
            .map_err(|e| Status::internal(format!("cannot create {}: {e}", path.display())))?;
        let cache = self.cache_dir(volume_id, plan.per_pod.then_some(path));
        let (flags, limit) = self.with_cache_limit(&req.flags)?;
        let mounted: Vec<(PathBuf, u64)> = self
            .mounted_caches()
            .into_iter()
            .filter(|(dir, _)| existing.is_none() || dir != &cache)
            .collect();
        let _admission = self
            .budget
            .admit(&cache, limit, &mounted)
            .map_err(|e| Status::resource_exhausted(e.to_string()))?;
        let scrub = if plan.identity.is_some() {
            pod_identity::plugin_credential_vars()
        } else {
            &[]
        };
        if let Err(e) = self
            .mounter
            .mount(&req.source, path, &cache, &flags, &req.env, scrub)
            .await
        {
            if plan.per_pod {
                remove_cache(&cache);
            }
            return Err(mount_status(e));
        }
        tracing::info!(volume = volume_id, path = %path.display(), source = %req.source, cache_limit = limit, per_pod = plan.per_pod, "mounted");
        self.state
            .put(&Record {
                volume_id: volume_id.to_string(),
                path: path.to_path_buf(),
                kind: MountKind::Daemon,
                digest,
                inline: plan.per_pod,
                cache: Some((cache, limit)),
            })
            .map_err(state_status)
    }

    /// Removes whatever this plugin mounted at `path`, and its record.
    async fn release(&self, path: &Path) -> Result<(), Status> {
        let rec = self.state.get(path);
        match rec.as_ref().map(|r| &r.kind) {
            Some(MountKind::Daemon) => self
                .mounter
                .unmount_daemon(path)
                .await
                .map_err(mount_status)?,
            Some(MountKind::Bind { .. }) | None if mounter::is_mountpoint(path) => {
                mounter::detach(path, 0)
                    .or_else(|_| mounter::detach(path, libc::MNT_DETACH))
                    .map_err(mount_status)?
            }
            _ => {}
        }
        if let Some(rec) = &rec {
            if rec.inline {
                // One pod's cache: nobody mounts it again.
                if let Some((cache, _)) = &rec.cache {
                    remove_cache(cache);
                }
            }
        }
        if let Some(tokens) = pod_identity::token_file(&self.tokens_dir, path).parent() {
            match std::fs::remove_dir_all(tokens) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(folder = %tokens.display(), error = %e, "cannot remove the pod's token")
                }
                _ => {}
            }
        }
        self.state.remove(path).map_err(state_status)
    }
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let r = request.into_inner();
        let volume_id = required(&r.volume_id, "volume id")?;
        let staging = absolute(
            required(&r.staging_target_path, "staging target path")?,
            "staging target path",
        )?;
        let flags = mount_flags(r.volume_capability.as_ref())?;
        let req = self.request(&r.volume_context, &flags, &r.secrets)?;
        if r.volume_context
            .get(pod_identity::AUTHENTICATION_SOURCE)
            .is_some_and(|s| s.trim() == "pod")
        {
            // Each pod brings its own token at publish: every pod gets a mount of its own.
            tracing::info!(
                volume = volume_id,
                "authenticationSource is pod: not staged, each publish mounts with the pod's token"
            );
            return Ok(Response::new(NodeStageVolumeResponse {}));
        }
        let _guard = self.lock(&staging).await;
        let plan = DaemonPlan {
            req,
            per_pod: false,
            identity: None,
        };
        self.ensure_daemon(volume_id, &staging, &plan).await?;
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let r = request.into_inner();
        required(&r.volume_id, "volume id")?;
        let staging = absolute(
            required(&r.staging_target_path, "staging target path")?,
            "staging target path",
        )?;
        let _guard = self.lock(&staging).await;
        self.release(&staging).await?;
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let r = request.into_inner();
        let volume_id = required(&r.volume_id, "volume id")?;
        let target = absolute(required(&r.target_path, "target path")?, "target path")?;
        let flags = mount_flags(r.volume_capability.as_ref())?;
        // Every volume is read-only, whatever the access mode or `readonly` say.
        let staged = (!r.staging_target_path.is_empty())
            .then(|| absolute(&r.staging_target_path, "staging target path"))
            .transpose()?
            .filter(|s| {
                self.state
                    .get(s)
                    .is_some_and(|rec| rec.volume_id == volume_id)
            });
        let _guard = self.lock(&target).await;
        match staged {
            Some(from) => {
                // A staged volume: bind it into the pod.
                let digest = format!("bind:{}", from.display());
                if let Some(rec) = self.state.get(&target) {
                    if rec.volume_id != volume_id || rec.digest != digest {
                        return Err(Status::already_exists(format!(
                            "{} already holds volume {} published from elsewhere",
                            target.display(),
                            rec.volume_id
                        )));
                    }
                    if mounter::is_mountpoint(&target) {
                        return Ok(Response::new(NodePublishVolumeResponse {}));
                    }
                }
                std::fs::create_dir_all(&target).map_err(|e| {
                    Status::internal(format!("cannot create {}: {e}", target.display()))
                })?;
                mounter::bind_read_only(&from, &target).map_err(mount_status)?;
                self.state
                    .put(&Record {
                        volume_id: volume_id.to_string(),
                        path: target.clone(),
                        kind: MountKind::Bind { from },
                        digest,
                        inline: false,
                        cache: None,
                    })
                    .map_err(state_status)?;
            }
            None => {
                // An inline volume, a volume mounted with the pod's own token (never staged),
                // or one whose staging is gone: mount the dataset right here.
                let inline = r.staging_target_path.is_empty()
                    || r.volume_context
                        .get(attributes::EPHEMERAL)
                        .is_some_and(|v| v == "true");
                let plan =
                    self.direct_plan(&target, &r.volume_context, &flags, &r.secrets, inline)?;
                self.ensure_daemon(volume_id, &target, &plan).await?;
            }
        }
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let r = request.into_inner();
        required(&r.volume_id, "volume id")?;
        let target = absolute(required(&r.target_path, "target path")?, "target path")?;
        let _guard = self.lock(&target).await;
        self.release(&target).await?;
        // The plugin created the target path; it removes it (an empty folder only).
        match std::fs::remove_dir(&target) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(target = %target.display(), error = %e, "cannot remove the target path");
            }
            _ => {}
        }
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let r = request.into_inner();
        let volume_id = required(&r.volume_id, "volume id")?;
        let path = PathBuf::from(required(&r.volume_path, "volume path")?);
        self.published_at(volume_id, &path)?;
        // The filesystem's own numbers (the dataset's size is not a capacity: statfs of a
        // shardfs mount reports what the daemon reports). A mount whose daemon died is abnormal.
        let (usage, condition) = match statvfs(&path) {
            Ok(st) => {
                let frsize = st.f_frsize as i64;
                let bytes = VolumeUsage {
                    total: st.f_blocks as i64 * frsize,
                    available: st.f_bavail as i64 * frsize,
                    used: (st.f_blocks.saturating_sub(st.f_bfree)) as i64 * frsize,
                    unit: volume_usage::Unit::Bytes as i32,
                };
                let inodes = VolumeUsage {
                    total: st.f_files as i64,
                    available: st.f_favail as i64,
                    used: st.f_files.saturating_sub(st.f_ffree) as i64,
                    unit: volume_usage::Unit::Inodes as i32,
                };
                let condition = if mounter::answers(&path) {
                    VolumeCondition {
                        abnormal: false,
                        message: "serving".into(),
                    }
                } else {
                    VolumeCondition {
                        abnormal: true,
                        message: "the dataset's index.json does not answer".into(),
                    }
                };
                (vec![bytes, inodes], condition)
            }
            Err(e) => (
                Vec::new(),
                VolumeCondition {
                    abnormal: true,
                    message: format!("the mount does not answer ({e}); restart the pod"),
                },
            ),
        };
        Ok(Response::new(NodeGetVolumeStatsResponse {
            usage,
            volume_condition: Some(condition),
        }))
    }

    async fn node_expand_volume(
        &self,
        request: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        let r = request.into_inner();
        let volume_id = required(&r.volume_id, "volume id")?;
        let path = PathBuf::from(required(&r.volume_path, "volume path")?);
        self.published_at(volume_id, &path)?;
        // A dataset volume has no size of its own to grow (its PV `capacity` is a label): the
        // request succeeds without change and reports the size asked for.
        let capacity = r.capacity_range.map(|c| c.required_bytes).unwrap_or(0);
        Ok(Response::new(NodeExpandVolumeResponse {
            capacity_bytes: capacity,
        }))
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let capabilities = [
            rpc::Type::StageUnstageVolume,
            rpc::Type::GetVolumeStats,
            rpc::Type::VolumeCondition,
            rpc::Type::ExpandVolume,
        ]
        .into_iter()
        .map(|t| NodeServiceCapability {
            r#type: Some(node_service_capability::Type::Rpc(Rpc { r#type: t as i32 })),
        })
        .collect();
        Ok(Response::new(NodeGetCapabilitiesResponse { capabilities }))
    }

    async fn node_get_info(
        &self,
        _request: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }
}
