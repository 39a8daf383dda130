//! docs/CONFIGURATION.md against the code: the generated command reference must equal what the
//! CLI definition generates now, and every environment variable the source reads must be listed.

use std::path::Path;

use shardfs::cli::reference;

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CONFIGURATION.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn configuration_reference_matches_the_cli() {
    let doc = doc();
    let start = doc
        .find(reference::BEGIN)
        .expect("no generated block in CONFIGURATION.md");
    let end = doc[start..]
        .find(reference::END)
        .map(|e| start + e + reference::END.len() + 1)
        .expect("no end of the generated block");
    let want = reference::reference_markdown();
    assert!(
        doc[start..end.min(doc.len())] == want,
        "docs/CONFIGURATION.md is out of date: replace its generated block with the output of \
         `cargo run -- generate-config-reference`"
    );
}

/// Names in `var("X")`, `var_os("X")`, `env_nonempty("X")` and clap's `env = "X"` in src/.
fn env_vars_read(dir: &Path, out: &mut std::collections::BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            env_vars_read(&p, out);
            continue;
        }
        if p.extension().and_then(|x| x.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for pat in [
            "var(\"",
            "var_os(\"",
            "env_nonempty(\"",
            "env_u64(env, \"",
            "env!(\"",
            "file(\"",
            "env = \"",
            "_ENV: &str = \"",
        ] {
            let mut rest = text.as_str();
            while let Some(i) = rest.find(pat) {
                rest = &rest[i + pat.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if name.len() > 2 && rest[name.len()..].starts_with('"') {
                    out.insert(name);
                }
            }
        }
    }
}

#[test]
fn every_environment_variable_the_code_reads_is_documented() {
    let mut names = std::collections::BTreeSet::new();
    env_vars_read(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut names,
    );
    for must in [
        "SHARDFS_IO",
        "AWS_ENDPOINT_URL",
        "WORLD_SIZE",
        "SHARDFS_LOG_FORMAT",
    ] {
        assert!(names.contains(must), "the scan missed {must}: {names:?}");
    }
    let doc = doc();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !matches!(n.as_str(), "PATH" | "CARGO_PKG_VERSION"))
        .filter(|n| !doc.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/CONFIGURATION.md: {missing:?}"
    );
}
