//! `ObjectKey`: a path relative to the dataset root that cannot escape it.
//!
//! Basenames come from `index.json`, which is external input: `"../../etc/passwd"` or
//! `"/abs"` must be refused before any store (or the local cache layout) sees them.

use super::StoreError;

/// A validated key relative to the dataset root, e.g. `index.json` or `3/shard.00000.mds`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(String);

impl ObjectKey {
    /// Validates `key`: non-empty `/`-separated segments, none of them `.` or `..`, no leading
    /// `/`, no backslashes or control characters.
    pub fn new(key: impl Into<String>) -> Result<Self, StoreError> {
        let key = key.into();
        let bad = |reason: &str| StoreError::InvalidKey {
            key: key.clone(),
            reason: reason.to_string(),
        };
        if key.is_empty() {
            return Err(bad("empty"));
        }
        if key.starts_with('/') {
            return Err(bad(
                "absolute paths are not allowed; keys are relative to the dataset root",
            ));
        }
        if key.contains('\\') {
            return Err(bad("backslashes are not allowed"));
        }
        if key.chars().any(|c| c.is_control()) {
            return Err(bad("control characters are not allowed"));
        }
        for seg in key.split('/') {
            match seg {
                "" => return Err(bad("empty path segment (`//` or trailing `/`)")),
                "." | ".." => {
                    return Err(bad("`.` and `..` segments would escape the dataset root"))
                }
                _ => {}
            }
        }
        Ok(ObjectKey(key))
    }

    /// The key as a `/`-separated string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_nested_keys() {
        assert_eq!(ObjectKey::new("index.json").unwrap().as_str(), "index.json");
        assert_eq!(
            ObjectKey::new("3/shard.00000.mds")
                .unwrap()
                .segments()
                .count(),
            2
        );
        assert!(ObjectKey::new("a..b/c.d").is_ok());
    }

    #[test]
    fn rejects_escapes() {
        for k in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a/",
            "a\\b",
            "a\nb",
            "..",
        ] {
            let e = ObjectKey::new(k).unwrap_err();
            assert!(matches!(e, StoreError::InvalidKey { .. }), "{k:?} gave {e}");
        }
    }
}
