//! `Source`: a parsed SOURCE argument (`s3://`, `gs://`, `az://`, `http(s)://`, `file://`, path).
//!
//! The source names the dataset root, the folder holding `index.json`; every key is resolved
//! against it. Its canonical string (`Source::canonical`) is what the cache uses as the
//! dataset's location identity, so `ds/`, `ds` and `./ds` map to the same cache folder.

use super::{ObjectKey, StoreError};
use std::path::PathBuf;

/// Which kind of store a source lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// Amazon S3 or any S3-compatible store: bucket name.
    S3 {
        /// The bucket.
        bucket: String,
    },
    /// Google Cloud Storage: bucket name.
    Gcs {
        /// The bucket.
        bucket: String,
    },
    /// Azure Blob Storage: container name (account from `AZURE_STORAGE_ACCOUNT_NAME`).
    Azure {
        /// The container.
        container: String,
    },
    /// Plain HTTP(S) server; the base URL ends at the dataset root.
    Http {
        /// Base URL without a trailing slash.
        base: String,
    },
    /// Local directory (absolute path).
    Local {
        /// The root directory.
        root: PathBuf,
    },
}

/// A parsed dataset source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The store kind and its bucket/container/base.
    pub kind: SourceKind,
    /// Path inside the bucket/container (no leading or trailing `/`; empty for the bucket root).
    pub prefix: String,
    /// The canonical URL of the root, without a trailing slash.
    canonical: String,
}

impl Source {
    /// Parses a SOURCE argument.
    pub fn parse(source: &str) -> Result<Source, StoreError> {
        let bad = |reason: &str| StoreError::InvalidSource {
            source_url: source.to_string(),
            reason: reason.to_string(),
        };
        if source.trim().is_empty() {
            return Err(bad("empty"));
        }
        let Some((scheme, rest)) = source.split_once("://") else {
            return Self::local(source, PathBuf::from(source));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                let url = url::Url::parse(source).map_err(|e| bad(&e.to_string()))?;
                let path = url.to_file_path().map_err(|_| bad("file:// URLs need an absolute path, e.g. file:///data/ds"))?;
                Self::local(source, path)
            }
            "http" | "https" => {
                let url = url::Url::parse(source).map_err(|e| bad(&e.to_string()))?;
                if url.host_str().is_none() {
                    return Err(bad("missing host"));
                }
                if url.query().is_some() || url.fragment().is_some() {
                    return Err(bad("query strings and fragments are not supported"));
                }
                let base = url.as_str().trim_end_matches('/').to_string();
                Ok(Source { canonical: base.clone(), kind: SourceKind::Http { base }, prefix: String::new() })
            }
            s @ ("s3" | "s3a" | "gs" | "az") => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("missing bucket name"));
                }
                let prefix = prefix.trim_matches('/').to_string();
                if !prefix.is_empty() {
                    ObjectKey::new(prefix.clone()).map_err(|e| bad(&e.to_string()))?;
                }
                let (kind, canon_scheme) = match s {
                    "s3" | "s3a" => (SourceKind::S3 { bucket: bucket.to_string() }, "s3"),
                    "gs" => (SourceKind::Gcs { bucket: bucket.to_string() }, "gs"),
                    _ => (SourceKind::Azure { container: bucket.to_string() }, "az"),
                };
                let canonical = if prefix.is_empty() {
                    format!("{canon_scheme}://{bucket}")
                } else {
                    format!("{canon_scheme}://{bucket}/{prefix}")
                };
                Ok(Source { kind, prefix, canonical })
            }
            other => Err(bad(&format!(
                "unsupported scheme {other:?}; use s3://, gs://, az://, http(s)://, file:// or a local path"
            ))),
        }
    }

    fn local(source: &str, path: PathBuf) -> Result<Source, StoreError> {
        let abs = std::path::absolute(&path).map_err(|e| StoreError::InvalidSource {
            source_url: source.to_string(),
            reason: e.to_string(),
        })?;
        let root = std::fs::canonicalize(&abs).unwrap_or(abs);
        let canonical = url::Url::from_file_path(&root)
            .map(|u| u.as_str().trim_end_matches('/').to_string())
            .unwrap_or_else(|_| format!("file://{}", root.display()));
        Ok(Source {
            kind: SourceKind::Local { root },
            prefix: String::new(),
            canonical,
        })
    }

    /// The canonical URL of the dataset root (no trailing slash); stable across spellings.
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The URL of `key` under the root, for messages.
    pub fn url_of(&self, key: &ObjectKey) -> String {
        format!("{}/{}", self.canonical, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme() {
        let s = Source::parse("s3://bkt/a/b/").unwrap();
        assert_eq!(
            s.kind,
            SourceKind::S3 {
                bucket: "bkt".into()
            }
        );
        assert_eq!(s.prefix, "a/b");
        assert_eq!(s.canonical(), "s3://bkt/a/b");
        assert_eq!(
            s.url_of(&ObjectKey::new("index.json").unwrap()),
            "s3://bkt/a/b/index.json"
        );
        assert_eq!(Source::parse("s3://bkt").unwrap().prefix, "");
        assert!(matches!(
            Source::parse("gs://g/x").unwrap().kind,
            SourceKind::Gcs { .. }
        ));
        assert!(matches!(
            Source::parse("az://c/x").unwrap().kind,
            SourceKind::Azure { .. }
        ));
        let h = Source::parse("http://127.0.0.1:8080/ds/").unwrap();
        assert_eq!(h.canonical(), "http://127.0.0.1:8080/ds");
        let f = Source::parse("file:///tmp").unwrap();
        assert!(matches!(f.kind, SourceKind::Local { .. }));
        assert_eq!(Source::parse("/tmp/").unwrap().canonical(), f.canonical());
    }

    #[test]
    fn rejects_bad_sources() {
        for s in [
            "",
            "s3://",
            "s3:///x",
            "ftp://h/x",
            "s3://b/../x",
            "http://h/x?y=1",
        ] {
            assert!(
                matches!(Source::parse(s), Err(StoreError::InvalidSource { .. })),
                "{s}"
            );
        }
    }
}
