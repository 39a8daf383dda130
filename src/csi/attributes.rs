//! A volume's attributes (`volumeAttributes` of a PV or an inline volume, plus `mountOptions`)
//! turned into the arguments of `shardfs mount`, and its secret into environment variables.
//!
//! Every `shardfs mount` option is accepted, spelled either in camelCase (`cacheLimit`) or as
//! the `-o` key (`cache_limit`, `cache-limit`); `source` names the dataset. Options the plugin
//! owns (`cache-dir`, `foreground`, `allow-other`) are refused. Keys kubelet adds
//! (`csi.storage.k8s.io/…`) are read for the pod's name and otherwise ignored.

use std::collections::{BTreeMap, HashMap};

/// The volume attribute that names the dataset.
pub const SOURCE: &str = "source";
/// Derive `--node-rank` from the trailing number of the pod's name (`…-worker-3` → 3 + offset).
pub const NODE_RANK_FROM_POD_NAME: &str = "nodeRankFromPodName";
/// Added to the number taken from the pod's name (PyTorchJob workers: 1, as master-0 is rank 0).
pub const NODE_RANK_OFFSET: &str = "nodeRankOffset";
/// The pod's name, which kubelet passes when the CSIDriver has `podInfoOnMount: true`.
pub const POD_NAME: &str = "csi.storage.k8s.io/pod.name";
/// The volume attribute that picks where credentials come from (`driver` or `pod`).
pub const AUTHENTICATION_SOURCE: &str = "authenticationSource";
/// The IAM role a pod's AWS web identity token is exchanged for.
pub const AWS_ROLE_ARN: &str = "awsRoleArn";
/// The Azure application (client) id a pod's federated token signs in as.
pub const AZURE_CLIENT_ID: &str = "azureClientId";
/// The Azure tenant of that application.
pub const AZURE_TENANT_ID: &str = "azureTenantId";
/// The attributes `pod_identity` reads (not options of `shardfs mount`).
pub const POD_IDENTITY_ATTRIBUTES: &[&str] = &[
    AUTHENTICATION_SOURCE,
    AWS_ROLE_ARN,
    AZURE_CLIENT_ID,
    AZURE_TENANT_ID,
];

/// `"true"` for an inline (ephemeral) volume, which kubelet passes with `podInfoOnMount: true`.
pub const EPHEMERAL: &str = "csi.storage.k8s.io/ephemeral";

/// Options of `shardfs mount` that the plugin sets itself.
pub const OWNED: &[&str] = &["cache-dir", "foreground", "allow-other", "help", "version"];

/// Why a volume's attributes cannot be mounted (reported to kubelet as InvalidArgument).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttributeError {
    /// `source` is missing or empty.
    #[error(
        "volume attribute `source` is required (the dataset URL or path, e.g. s3://bucket/train)"
    )]
    MissingSource,
    /// A key that is not an option of `shardfs mount`.
    #[error("unknown volume attribute `{0}` (accepted: `source` and the options of `shardfs mount`, see docs/KUBERNETES.md)")]
    Unknown(String),
    /// A key naming an option the plugin controls.
    #[error("volume attribute `{0}` is set by the plugin and cannot be given")]
    Owned(String),
    /// A bad value for one of the plugin's own attributes.
    #[error("volume attribute `{key}`: {reason}")]
    BadValue {
        /// The attribute.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A secret key that cannot be an environment variable name.
    #[error("secret key `{0}` is not a valid environment variable name")]
    BadSecretKey(String),
}

/// `cacheLimit`, `cache_limit` and `cache-limit` all become `cache-limit`.
pub fn flag_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for (i, c) in key.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '_' {
            out.push('-');
        } else {
            out.push(c);
        }
    }
    out
}

/// What `shardfs mount` is run with for one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountRequest {
    /// The dataset (`source`).
    pub source: String,
    /// `--flag=value` / `--flag` arguments, in a stable order.
    pub flags: Vec<String>,
    /// Environment variables from the volume's secret.
    pub env: BTreeMap<String, String>,
}

impl MountRequest {
    /// A digest of everything that shapes the mount, to tell a repeated request from a
    /// different one at the same path (secret values are hashed, never stored).
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(self.source.as_bytes());
        for f in &self.flags {
            h.update([0]);
            h.update(f.as_bytes());
        }
        for (k, v) in &self.env {
            h.update([1]);
            h.update(k.as_bytes());
            h.update([2]);
            h.update(v.as_bytes());
        }
        hex::encode(h.finalize())
    }
}

/// Builds the mount request from a volume's context, its mount flags (a PV's `mountOptions`,
/// `key=value` or `key`) and its secret. `known_flags` are the long options of `shardfs mount`.
pub fn mount_request(
    context: &HashMap<String, String>,
    mount_flags: &[String],
    secrets: &HashMap<String, String>,
    known_flags: &[String],
) -> Result<MountRequest, AttributeError> {
    let source = context
        .get(SOURCE)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or(AttributeError::MissingSource)?;
    let mut flags = BTreeMap::new();
    let mut add = |key: &str, value: Option<&str>| -> Result<(), AttributeError> {
        let name = flag_name(key);
        if OWNED.contains(&name.as_str()) {
            return Err(AttributeError::Owned(key.to_string()));
        }
        if !known_flags.contains(&name) {
            return Err(AttributeError::Unknown(key.to_string()));
        }
        let arg = match value {
            // Boolean options: "true" sets the flag, "false" leaves it out.
            Some("true") | None => format!("--{name}"),
            Some("false") => return Ok(()),
            Some(v) => format!("--{name}={v}"),
        };
        flags.insert(name, arg);
        Ok(())
    };
    for item in mount_flags {
        // A PV's mountOptions also carries generic options (ro, noatime, …): the generic ones
        // mean nothing to a read-only FUSE dataset and are skipped, like mount(8)'s are.
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (item.trim(), None),
        };
        if k.is_empty() || GENERIC.contains(&k) || k.starts_with("x-") {
            continue;
        }
        add(k, v)?;
    }
    let mut rank_from_pod = false;
    let mut rank_offset: u64 = 0;
    for (k, v) in context {
        match k.as_str() {
            SOURCE => {}
            NODE_RANK_FROM_POD_NAME => rank_from_pod = parse_bool(k, v)?,
            NODE_RANK_OFFSET => {
                rank_offset = v
                    .trim()
                    .parse()
                    .map_err(|_| bad_value(k, format!("{v:?} is not a non-negative integer")))?
            }
            _ if k.starts_with("csi.storage.k8s.io/") => {}
            // Read by the pod-identity module.
            _ if POD_IDENTITY_ATTRIBUTES.contains(&k.as_str()) => {}
            _ => add(k, Some(v.as_str()))?,
        }
    }
    if rank_from_pod {
        let pod = context
            .get(POD_NAME)
            .ok_or_else(|| bad_value(NODE_RANK_FROM_POD_NAME, "kubelet passed no pod name (the CSIDriver needs podInfoOnMount: true; PersistentVolumes are staged without a pod: give nodeRank instead)"))?;
        let n = trailing_number(pod).ok_or_else(|| {
            bad_value(
                NODE_RANK_FROM_POD_NAME,
                format!("pod name {pod:?} does not end in -<number>"),
            )
        })?;
        let rank = n
            .checked_add(rank_offset)
            .ok_or_else(|| bad_value(NODE_RANK_OFFSET, "too large"))?;
        flags.insert("node-rank".into(), format!("--node-rank={rank}"));
    }
    let mut env = BTreeMap::new();
    for (k, v) in secrets {
        let valid = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(AttributeError::BadSecretKey(k.clone()));
        }
        env.insert(k.clone(), v.clone());
    }
    Ok(MountRequest {
        source,
        flags: flags.into_values().collect(),
        env,
    })
}

/// Generic mount options a PV's `mountOptions` may carry; accepted and ignored.
const GENERIC: &[&str] = &[
    "ro", "rw", "defaults", "noatime", "relatime", "nodev", "nosuid", "noexec", "_netdev", "nofail",
];

fn parse_bool(key: &str, v: &str) -> Result<bool, AttributeError> {
    match v.trim() {
        "true" | "True" | "1" | "yes" => Ok(true),
        "false" | "False" | "0" | "no" | "" => Ok(false),
        other => Err(bad_value(key, format!("{other:?} is not true or false"))),
    }
}

/// A bad value for the plugin's attribute `key`.
fn bad_value(key: &str, reason: impl Into<String>) -> AttributeError {
    AttributeError::BadValue {
        key: key.into(),
        reason: reason.into(),
    }
}

fn trailing_number(name: &str) -> Option<u64> {
    let digits = name.rsplit('-').next()?;
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A volume context of `(key, value)` pairs, for the csi modules' tests.
#[cfg(test)]
pub(crate) fn ctx(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        [
            "cache-limit",
            "shuffle",
            "ranks-per-node",
            "node-rank",
            "endpoint-url",
            "cache-dir",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    #[test]
    fn camel_case_and_o_keys_map_to_the_same_flags() {
        assert_eq!(flag_name("cacheLimit"), "cache-limit");
        assert_eq!(flag_name("cache_limit"), "cache-limit");
        assert_eq!(flag_name("ranksPerNode"), "ranks-per-node");
        let a = mount_request(
            &ctx(&[
                ("source", "s3://b/d"),
                ("cacheLimit", "1GiB"),
                ("shuffle", "true"),
            ]),
            &[],
            &HashMap::new(),
            &known(),
        )
        .unwrap();
        let b = mount_request(
            &ctx(&[("source", "s3://b/d")]),
            &["cache_limit=1GiB".into(), "shuffle".into(), "ro".into()],
            &HashMap::new(),
            &known(),
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.flags, vec!["--cache-limit=1GiB", "--shuffle"]);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn bad_attributes_are_refused_by_name() {
        let none = HashMap::new();
        let refused =
            |attrs: &[(&str, &str)]| mount_request(&ctx(attrs), &[], &none, &known()).unwrap_err();
        assert_eq!(
            refused(&[("shuffle", "true")]),
            AttributeError::MissingSource
        );
        assert_eq!(
            refused(&[("source", "x"), ("colour", "red")]),
            AttributeError::Unknown("colour".into())
        );
        assert_eq!(
            refused(&[("source", "x"), ("cacheDir", "/etc")]),
            AttributeError::Owned("cacheDir".into())
        );
        let bad_secret = ctx(&[("AWS KEY", "x")]);
        assert!(matches!(
            mount_request(&ctx(&[("source", "x")]), &[], &bad_secret, &known()),
            Err(AttributeError::BadSecretKey(_))
        ));
    }

    #[test]
    fn node_rank_comes_from_the_pod_name() {
        let none = HashMap::new();
        let r = mount_request(
            &ctx(&[
                ("source", "x"),
                (NODE_RANK_FROM_POD_NAME, "true"),
                (NODE_RANK_OFFSET, "1"),
                (POD_NAME, "bert-worker-2"),
            ]),
            &[],
            &none,
            &known(),
        )
        .unwrap();
        assert_eq!(r.flags, vec!["--node-rank=3"]);
        let r = mount_request(
            &ctx(&[("source", "x"), (NODE_RANK_FROM_POD_NAME, "true")]),
            &[],
            &none,
            &known(),
        );
        assert!(matches!(r, Err(AttributeError::BadValue { .. })));
    }
}
