//! The AWS shared config/credentials files (`~/.aws/credentials`, `~/.aws/config`).
//!
//! `object_store` resolves environment, web identity, container and instance credentials but
//! not profiles, so we read the two INI files here (format: AWS SDK "Shared config and
//! credentials files" reference). Only static keys (`aws_access_key_id`,
//! `aws_secret_access_key`, `aws_session_token`) and `region` are used.

use std::collections::HashMap;
use std::path::PathBuf;

/// A profile file that exists but cannot be read (named by its path, never its content).
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {}", path.display(), source.kind())]
pub(crate) struct ProfileError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// Static settings found for one profile.
#[derive(Default, Clone)]
pub(crate) struct ProfileSettings {
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
}

impl std::fmt::Debug for ProfileSettings {
    // Never print secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileSettings")
            .field("has_keys", &self.access_key_id.is_some())
            .field("region", &self.region)
            .finish()
    }
}

/// Reads the profile named by `AWS_PROFILE` (default `default`) from the files named by
/// `AWS_SHARED_CREDENTIALS_FILE` / `AWS_CONFIG_FILE` (default under `$HOME/.aws`).
/// Missing files are not an error; an unreadable one is reported by name (not its content).
pub(crate) fn load_profile() -> Result<ProfileSettings, ProfileError> {
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_string());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let file = |var: &str, name: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
    };
    let mut out = ProfileSettings::default();
    // credentials file: section `[name]`; config file: `[profile name]` or `[default]`.
    for (path, section) in [
        (
            file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
            profile.clone(),
        ),
        (
            file("AWS_CONFIG_FILE", "config"),
            if profile == "default" {
                profile.clone()
            } else {
                format!("profile {profile}")
            },
        ),
    ] {
        let Some(path) = path else { continue };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(ProfileError { path, source }),
        };
        let values = parse_ini(&text).remove(&section).unwrap_or_default();
        let take = |k: &str| values.get(k).cloned();
        out.access_key_id = out.access_key_id.or(take("aws_access_key_id"));
        out.secret_access_key = out.secret_access_key.or(take("aws_secret_access_key"));
        out.session_token = out.session_token.or(take("aws_session_token"));
        out.region = out.region.or(take("region"));
    }
    Ok(out)
}

/// Minimal INI: `[section]`, `key = value`, `#`/`;` comments; keys lower-cased.
fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.trim().to_string());
            continue;
        }
        if let (Some(sec), Some((k, v))) = (&section, line.split_once('=')) {
            out.entry(sec.clone())
                .or_default()
                .insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parse_ini;

    #[test]
    fn parses_sections_and_comments() {
        let ini = "# c\n[default]\naws_access_key_id = AK\nAWS_SECRET_ACCESS_KEY=SK\n[profile x]\nregion = eu-west-1\n";
        let m = parse_ini(ini);
        assert_eq!(m["default"]["aws_access_key_id"], "AK");
        assert_eq!(m["default"]["aws_secret_access_key"], "SK");
        assert_eq!(m["profile x"]["region"], "eu-west-1");
    }
}
