//! Per-pod cloud identity: the pod's service-account token, which kubelet hands the plugin
//! when the CSIDriver lists `tokenRequests`, becomes the mount daemon's credentials.
//!
//! A volume opts in with `authenticationSource: pod`. kubelet passes the tokens in the volume
//! context (`csi.storage.k8s.io/serviceAccount.tokens`, JSON: audience → `{token,
//! expirationTimestamp}`) at every NodePublishVolume, and with `requiresRepublish: true` calls
//! it again before they expire. The plugin writes the token to a file of its own (mode 0600,
//! replaced atomically at each republish) and points the daemon at it:
//! - audience `sts.amazonaws.com` with the `awsRoleArn` attribute: AWS web identity (IRSA):
//!   `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`; the daemon calls STS
//!   AssumeRoleWithWebIdentity and reads the file again each time its credentials near expiry.
//! - audience `pods.eks.amazonaws.com`: EKS Pod Identity: `AWS_CONTAINER_CREDENTIALS_FULL_URI`
//!   (the node's Pod Identity Agent) + `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`.
//! - audience `api://AzureADTokenExchange` with `azureClientId` and `azureTenantId`: Azure
//!   workload identity (`AZURE_FEDERATED_TOKEN_FILE`).
//!
//! The daemon then gets none of the plugin's own credentials (they are removed from its
//! environment), so the pod reads only what its service account may read.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub use super::attributes::{
    AUTHENTICATION_SOURCE, AWS_ROLE_ARN, AZURE_CLIENT_ID, AZURE_TENANT_ID,
    POD_IDENTITY_ATTRIBUTES as ATTRIBUTES,
};
/// The key under which kubelet passes the pod's tokens.
pub const TOKENS: &str = "csi.storage.k8s.io/serviceAccount.tokens";
/// The audience of AWS web identity (IRSA) tokens.
pub const AUDIENCE_STS: &str = "sts.amazonaws.com";
/// The audience of EKS Pod Identity tokens.
pub const AUDIENCE_EKS: &str = "pods.eks.amazonaws.com";
/// The audience of Azure workload identity tokens.
pub const AUDIENCE_AZURE: &str = "api://AzureADTokenExchange";
/// Where the EKS Pod Identity Agent answers on every node.
pub const EKS_AGENT_URI: &str = "http://169.254.170.23/v1/credentials";

/// Environment variables of the plugin that would give the daemon the plugin's identity.
const PLUGIN_CREDENTIALS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
];

/// Why a volume's pod identity cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// An `authenticationSource` other than `driver` or `pod`.
    #[error("volume attribute `authenticationSource` is {0:?}: use `driver` (the plugin's credentials) or `pod` (the pod's service account)")]
    BadSource(String),
    /// `authenticationSource: pod` but kubelet passed no token.
    #[error("authenticationSource is `pod` but kubelet passed no service-account token: the CSIDriver needs tokenRequests (audience sts.amazonaws.com, pods.eks.amazonaws.com or api://AzureADTokenExchange) and requiresRepublish: true")]
    NoToken,
    /// The tokens kubelet passed are not the expected JSON.
    #[error("cannot read the service-account tokens kubelet passed: {0}")]
    BadTokens(String),
    /// An identity without the token or attribute it needs.
    #[error("pod identity for {audience} needs {attribute}")]
    Missing {
        /// The token's audience.
        audience: &'static str,
        /// The attribute or setting to add.
        attribute: &'static str,
    },
    /// Pod credentials together with a volume secret.
    #[error("authenticationSource is `pod`: the volume may not also carry a secret")]
    WithSecret,
}

/// One audience's entry of `csi.storage.k8s.io/serviceAccount.tokens`
/// (`{"token": "...", "expirationTimestamp": "..."}`); only the token is used.
#[derive(Debug, serde::Deserialize)]
struct ServiceAccountToken {
    /// The token; an entry without one counts as no token for that audience.
    #[serde(default)]
    token: Option<String>,
}

/// The credentials a pod brings for one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    /// The token's audience.
    pub audience: &'static str,
    /// The token (never logged, never stored in a record).
    token: String,
    /// Variables for the daemon besides the token file's.
    settings: BTreeMap<String, String>,
}

impl PodIdentity {
    /// The pod identity a volume asks for, if any (`authenticationSource: pod`).
    pub fn from_context(
        context: &HashMap<String, String>,
        secrets: &HashMap<String, String>,
    ) -> Result<Option<PodIdentity>, IdentityError> {
        match context.get(AUTHENTICATION_SOURCE).map(|s| s.trim()) {
            None | Some("") | Some("driver") => return Ok(None),
            Some("pod") => {}
            Some(other) => return Err(IdentityError::BadSource(other.to_string())),
        }
        if !secrets.is_empty() {
            return Err(IdentityError::WithSecret);
        }
        let raw = context
            .get(TOKENS)
            .filter(|t| !t.trim().is_empty())
            .ok_or(IdentityError::NoToken)?;
        let tokens: HashMap<String, ServiceAccountToken> =
            serde_json::from_str(raw).map_err(|e| IdentityError::BadTokens(e.to_string()))?;
        let token_of = |aud: &str| {
            tokens
                .get(aud)
                .and_then(|t| t.token.clone())
                .filter(|t| !t.is_empty())
        };
        let attr = |name: &str| {
            context
                .get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut settings = BTreeMap::new();
        // kubelet passes a token for every audience of the CSIDriver: the volume's attributes
        // say which identity it uses (a role ARN: web identity; an Azure client: workload
        // identity; neither: EKS Pod Identity).
        let (audience, token) = if let Some(role) = attr(AWS_ROLE_ARN) {
            let token = token_of(AUDIENCE_STS).ok_or(IdentityError::Missing {
                audience: AUDIENCE_STS,
                attribute: "tokenRequests audience sts.amazonaws.com in the CSIDriver",
            })?;
            settings.insert("AWS_ROLE_ARN".into(), role);
            let session = context
                .get(super::attributes::POD_NAME)
                .map(|p| format!("shardfs-{p}"))
                .unwrap_or_else(|| "shardfs".into());
            // STS allows [\w+=,.@-]{2,64}.
            let session: String = session
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "+=,.@-_".contains(*c))
                .take(64)
                .collect();
            settings.insert("AWS_ROLE_SESSION_NAME".into(), session);
            (AUDIENCE_STS, token)
        } else if let Some(client) = attr(AZURE_CLIENT_ID) {
            let token = token_of(AUDIENCE_AZURE).ok_or(IdentityError::Missing {
                audience: AUDIENCE_AZURE,
                attribute: "tokenRequests audience api://AzureADTokenExchange in the CSIDriver",
            })?;
            let tenant = attr(AZURE_TENANT_ID).ok_or(IdentityError::Missing {
                audience: AUDIENCE_AZURE,
                attribute: AZURE_TENANT_ID,
            })?;
            settings.insert("AZURE_CLIENT_ID".into(), client);
            settings.insert("AZURE_TENANT_ID".into(), tenant);
            (AUDIENCE_AZURE, token)
        } else if let Some(token) = token_of(AUDIENCE_EKS) {
            settings.insert(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI".into(),
                EKS_AGENT_URI.into(),
            );
            (AUDIENCE_EKS, token)
        } else {
            return Err(IdentityError::NoToken);
        };
        Ok(Some(PodIdentity {
            audience,
            token,
            settings,
        }))
    }

    /// The variable that names the token file for this audience.
    fn token_file_var(&self) -> &'static str {
        match self.audience {
            AUDIENCE_EKS => "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            AUDIENCE_AZURE => "AZURE_FEDERATED_TOKEN_FILE",
            _ => "AWS_WEB_IDENTITY_TOKEN_FILE",
        }
    }

    /// The daemon's environment: these settings and `token_file` (the same path at every
    /// republish, so a repeated publish is the same mount request).
    pub fn env(&self, token_file: &Path) -> BTreeMap<String, String> {
        let mut env = self.settings.clone();
        env.insert(
            self.token_file_var().into(),
            token_file.to_string_lossy().into_owned(),
        );
        env
    }

    /// Writes the token to `file` (mode 0600) in one step: a daemon reading it sees the old
    /// token or the new one, never a part.
    pub fn write_token(&self, file: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(dir) = file.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let tmp = file.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(self.token.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)
    }
}

/// The token file of the volume published at `target`, under the plugin's state folder.
pub fn token_file(state_dir: &Path, target: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let key = hex::encode(&Sha256::digest(target.as_os_str().as_encoded_bytes())[..16]);
    state_dir.join("tokens").join(key).join("token")
}

/// The plugin's own credential variables, which a daemon with a pod identity must not inherit.
pub fn plugin_credential_vars() -> &'static [&'static str] {
    PLUGIN_CREDENTIALS
}

#[cfg(test)]
mod tests {
    use super::super::attributes::ctx;
    use super::*;

    #[test]
    fn the_pods_sts_token_becomes_a_web_identity() {
        let tokens = r#"{"sts.amazonaws.com":{"token":"eyJ.a.b","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#;
        let c = ctx(&[
            (AUTHENTICATION_SOURCE, "pod"),
            (AWS_ROLE_ARN, "arn:aws:iam::123456789012:role/reader"),
            (TOKENS, tokens),
            (super::super::attributes::POD_NAME, "bert-worker-0"),
        ]);
        let id = PodIdentity::from_context(&c, &HashMap::new())
            .unwrap()
            .unwrap();
        let env = id.env(Path::new("/s/t/token"));
        assert_eq!(env["AWS_WEB_IDENTITY_TOKEN_FILE"], "/s/t/token");
        assert_eq!(env["AWS_ROLE_ARN"], "arn:aws:iam::123456789012:role/reader");
        assert_eq!(env["AWS_ROLE_SESSION_NAME"], "shardfs-bert-worker-0");
        assert!(!format!("{env:?}").contains("eyJ"), "no token in the env");
    }

    #[test]
    fn pod_identity_is_opt_in_and_checked() {
        let none = HashMap::new();
        assert_eq!(PodIdentity::from_context(&ctx(&[]), &none), Ok(None));
        assert_eq!(
            PodIdentity::from_context(&ctx(&[(AUTHENTICATION_SOURCE, "pod")]), &none),
            Err(IdentityError::NoToken)
        );
        assert!(matches!(
            PodIdentity::from_context(&ctx(&[(AUTHENTICATION_SOURCE, "node")]), &none),
            Err(IdentityError::BadSource(_))
        ));
        let eks = r#"{"pods.eks.amazonaws.com":{"token":"t"}}"#;
        assert!(matches!(
            PodIdentity::from_context(
                &ctx(&[
                    (AUTHENTICATION_SOURCE, "pod"),
                    (AWS_ROLE_ARN, "arn:aws:iam::1:role/r"),
                    (TOKENS, eks)
                ]),
                &none
            ),
            Err(IdentityError::Missing { .. })
        ));
        // Both tokens (the CSIDriver asks for both audiences), no role: EKS Pod Identity.
        let both = r#"{"pods.eks.amazonaws.com":{"token":"t"},"sts.amazonaws.com":{"token":"s"}}"#;
        let id = PodIdentity::from_context(
            &ctx(&[(AUTHENTICATION_SOURCE, "pod"), (TOKENS, both)]),
            &none,
        )
        .unwrap()
        .unwrap();
        assert_eq!(id.audience, AUDIENCE_EKS);
        let id = PodIdentity::from_context(
            &ctx(&[(AUTHENTICATION_SOURCE, "pod"), (TOKENS, eks)]),
            &none,
        )
        .unwrap()
        .unwrap();
        let env = id.env(Path::new("/f"));
        assert_eq!(env["AWS_CONTAINER_CREDENTIALS_FULL_URI"], EKS_AGENT_URI);
        assert_eq!(env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"], "/f");
        assert_eq!(
            PodIdentity::from_context(
                &ctx(&[(AUTHENTICATION_SOURCE, "pod"), (TOKENS, eks)]),
                &ctx(&[("AWS_ACCESS_KEY_ID", "x")])
            ),
            Err(IdentityError::WithSecret)
        );
    }
}
