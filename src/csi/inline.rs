//! The rules for inline (CSI ephemeral) volumes, which any pod author can write.
//!
//! A PersistentVolume is written by a cluster administrator; an inline volume by whoever may
//! create pods. Its daemon runs with the plugin's credentials and on the node's network, so an
//! inline volume is refused unless the operator turned them on (`shardfs csi
//! --inline-volumes`; with `own-credentials` only those that bring their own credentials), and even then it may not name the node: no local path as `source`,
//! no attribute that opens a file or a port on the node (`metricsAddr`, `resumeState`), and no
//! store address on the node's loopback or link-local networks (the instance metadata service,
//! the node's own services).

use std::net::IpAddr;

use super::attributes::MountRequest;
use crate::store::{Source, SourceKind};

/// `shardfs mount` options an inline volume may not set: they open a file or a port of the node.
pub const NODE_OPTIONS: &[&str] = &["metrics-addr", "resume-state", "cache-dir"];

/// Which inline volumes the operator allows (`shardfs csi --inline-volumes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineVolumes {
    /// None (the default): only PersistentVolumes.
    Off,
    /// Those that bring their own credentials: the pod's identity (`authenticationSource:
    /// pod`), a secret (`nodePublishSecretRef`), or none for public data (`noSignRequest`).
    OwnCredentials,
    /// Any, also with the plugin's own credentials (every pod author can read what it can).
    Any,
}

/// The operator's rules for inline volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlinePolicy {
    /// Which inline volumes are allowed.
    pub mode: InlineVolumes,
    /// Hosts on the node that inline volumes may reach all the same (a store the operator
    /// serves on the node itself), as written in the URL: `127.0.0.1`, `localhost`.
    pub node_hosts: Vec<String>,
}

impl InlinePolicy {
    /// No inline volumes.
    pub fn off() -> InlinePolicy {
        InlinePolicy {
            mode: InlineVolumes::Off,
            node_hosts: Vec::new(),
        }
    }
}

/// Why an inline volume is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InlineError {
    /// The operator did not turn inline volumes on.
    #[error("inline (ephemeral) volumes are turned off on this node: use a PersistentVolume, or ask the operator to start the plugin with --inline-volumes=own-credentials")]
    Disabled,
    /// Inline volumes must bring their own credentials, and this one does not.
    #[error("this node allows inline volumes only with their own credentials: set authenticationSource: pod, a nodePublishSecretRef, or noSignRequest: \"true\" for public data")]
    BorrowedCredentials,
    /// The source is a path of the node.
    #[error("an inline volume's `source` must be a store URL (s3://, gs://, az://, https://), not a path of the node: {0:?}")]
    LocalSource(String),
    /// An option that touches the node.
    #[error("an inline volume may not set `{0}` (it opens a file or a port of the node); use a PersistentVolume")]
    NodeOption(String),
    /// A store address on the node itself or the link-local network.
    #[error("an inline volume may not reach {0:?}: loopback and link-local addresses belong to the node")]
    NodeAddress(String),
    /// The source cannot be parsed.
    #[error("volume attribute `source`: {0}")]
    BadSource(String),
}

/// Checks `req`, the request of an inline volume, against the policy; `own_credentials`:
/// the volume uses the pod's identity or a secret.
pub fn check(
    policy: &InlinePolicy,
    req: &MountRequest,
    own_credentials: bool,
) -> Result<(), InlineError> {
    let unsigned = req.flags.iter().any(|f| f == "--no-sign-request");
    let node_hosts = &policy.node_hosts;
    match policy.mode {
        InlineVolumes::Off => return Err(InlineError::Disabled),
        InlineVolumes::OwnCredentials if !own_credentials && !unsigned => {
            return Err(InlineError::BorrowedCredentials)
        }
        _ => {}
    }
    check_source(&req.source, node_hosts)?;
    for flag in &req.flags {
        let body = flag.trim_start_matches('-');
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        if NODE_OPTIONS.contains(&name) {
            return Err(InlineError::NodeOption(name.to_string()));
        }
        match (name, value) {
            ("endpoint-url", Some(url)) => check_host(url, node_hosts)?,
            // A stream names a source of its own before its first comma.
            ("stream", Some(spec)) => {
                check_source(spec.split(',').next().unwrap_or(""), node_hosts)?
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_source(source: &str, node_hosts: &[String]) -> Result<(), InlineError> {
    let parsed = Source::parse(source).map_err(|e| InlineError::BadSource(e.to_string()))?;
    match parsed.kind {
        SourceKind::Local { .. } => Err(InlineError::LocalSource(source.to_string())),
        SourceKind::Http { base } => check_host(&base, node_hosts),
        _ => Ok(()),
    }
}

/// Refuses URLs (or bare `host:port`) whose host is the node: `localhost`, loopback,
/// link-local (169.254.0.0/16, where the instance metadata service answers, fe80::/10) or
/// unspecified addresses, unless the operator listed the host in `node_hosts`.
fn check_host(url: &str, node_hosts: &[String]) -> Result<(), InlineError> {
    let with_scheme = if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    };
    let host = match url::Url::parse(&with_scheme) {
        Ok(u) => u.host_str().unwrap_or("").to_string(),
        Err(_) => return Err(InlineError::NodeAddress(url.to_string())),
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if node_hosts.iter().any(|h| h.eq_ignore_ascii_case(bare)) {
        return Ok(());
    }
    let lower = bare.to_ascii_lowercase();
    let node = lower == "localhost"
        || lower.ends_with(".localhost")
        || match bare.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => ip.is_loopback() || ip.is_link_local() || ip.is_unspecified(),
            Ok(IpAddr::V6(ip)) => {
                ip.is_loopback()
                    || ip.is_unspecified()
                    || (ip.segments()[0] & 0xffc0) == 0xfe80
                    || ip
                        .to_ipv4_mapped()
                        .is_some_and(|v4| v4.is_loopback() || v4.is_link_local())
            }
            Err(_) => false,
        };
    if node {
        return Err(InlineError::NodeAddress(url.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn any() -> InlinePolicy {
        InlinePolicy {
            mode: InlineVolumes::Any,
            node_hosts: Vec::new(),
        }
    }

    fn req(source: &str, flags: &[&str]) -> MountRequest {
        MountRequest {
            source: source.into(),
            flags: flags.iter().map(|f| f.to_string()).collect(),
            env: BTreeMap::new(),
        }
    }

    #[test]
    fn inline_volumes_are_off_unless_allowed() {
        let own = InlinePolicy {
            mode: InlineVolumes::OwnCredentials,
            node_hosts: Vec::new(),
        };
        let plain = req("s3://b/d", &["--shuffle"]);
        assert_eq!(
            check(&InlinePolicy::off(), &plain, true),
            Err(InlineError::Disabled)
        );
        assert_eq!(
            check(&own, &plain, false),
            Err(InlineError::BorrowedCredentials)
        );
        assert_eq!(check(&own, &plain, true), Ok(()));
        assert_eq!(
            check(&own, &req("s3://b/d", &["--no-sign-request"]), false),
            Ok(())
        );
        assert_eq!(check(&any(), &plain, false), Ok(()));
        let local = req("s3://b/d", &["--endpoint-url=http://127.0.0.1:9000"]);
        assert!(check(&any(), &local, true).is_err());
        let served_on_node = InlinePolicy {
            mode: InlineVolumes::Any,
            node_hosts: vec!["127.0.0.1".into()],
        };
        assert_eq!(check(&served_on_node, &local, true), Ok(()));
    }

    #[test]
    fn inline_volumes_may_not_name_the_node() {
        for local in ["/var/lib/kubelet", "file:///etc", "relative/dir"] {
            assert!(
                matches!(
                    check(&any(), &req(local, &[]), true),
                    Err(InlineError::LocalSource(_))
                ),
                "{local}"
            );
        }
        for flag in ["--metrics-addr=0.0.0.0:9100", "--resume-state=/etc/shadow"] {
            assert!(
                matches!(
                    check(&any(), &req("s3://b/d", &[flag]), true),
                    Err(InlineError::NodeOption(_))
                ),
                "{flag}"
            );
        }
        for url in [
            "http://127.0.0.1:9000",
            "http://localhost:9000",
            "http://169.254.169.254",
            "http://[::1]:80",
            "http://[fe80::1]:80",
            "0.0.0.0:80",
        ] {
            assert!(
                matches!(
                    check(
                        &any(),
                        &req("s3://b/d", &[&format!("--endpoint-url={url}")]),
                        true
                    ),
                    Err(InlineError::NodeAddress(_))
                ),
                "{url}"
            );
        }
        assert!(matches!(
            check(&any(), &req("http://169.254.169.254/latest", &[]), true),
            Err(InlineError::NodeAddress(_))
        ));
        assert!(matches!(
            check(
                &any(),
                &req("s3://b/d", &["--stream=/data/x,proportion=0.5"]),
                true
            ),
            Err(InlineError::LocalSource(_))
        ));
        assert_eq!(
            check(
                &any(),
                &req(
                    "s3://b/d",
                    &["--endpoint-url=http://minio.storage.svc:9000"]
                ),
                true
            ),
            Ok(())
        );
    }
}
