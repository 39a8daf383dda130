//! The generated part of docs/CONFIGURATION.md: every command and option of the one CLI
//! definition, with its default, environment variable and, for `shardfs mount`, its `-o` key
//! and CSI volume attribute. A test compares the document with [`reference_markdown`], so the
//! reference cannot drift from the code (`shardfs generate-config-reference` prints it).

use clap::CommandFactory;

use super::Cli;

/// Start and end markers of the generated block in docs/CONFIGURATION.md.
pub const BEGIN: &str = "<!-- BEGIN GENERATED: shardfs generate-config-reference -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- END GENERATED -->";

fn camel(long: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in long.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The option rows of one command: (flag, value, default, env, help).
fn rows(cmd: &clap::Command) -> Vec<(String, String, String, String, String)> {
    let mut out = Vec::new();
    for a in cmd.get_arguments() {
        if a.is_hide_set() || a.get_id() == "help" || a.get_id() == "version" {
            continue;
        }
        let flag = match (a.get_long(), a.get_short()) {
            (Some(l), Some(s)) => format!("`-{s}`, `--{l}`"),
            (Some(l), None) => format!("`--{l}`"),
            (None, Some(s)) => format!("`-{s}`"),
            (None, None) => format!(
                "`{}`",
                a.get_value_names()
                    .map(|v| v
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(" "))
                    .unwrap_or_else(|| a.get_id().as_str().to_uppercase())
            ),
        };
        let takes_value = a.get_action().takes_values();
        let value = if !takes_value {
            String::new()
        } else {
            let possible: Vec<String> = a
                .get_possible_values()
                .iter()
                .filter(|p| !p.is_hide_set())
                .map(|p| p.get_name().to_string())
                .collect();
            if possible.is_empty() {
                a.get_value_names()
                    .map(|v| {
                        v.iter()
                            .map(|n| n.to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_else(|| a.get_id().as_str().to_uppercase())
            } else {
                possible.join("\\|")
            }
        };
        let default: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        let default = if default.is_empty() {
            String::new()
        } else {
            format!("`{}`", default.join(","))
        };
        let env = a
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let help = a
            .get_long_help()
            .or_else(|| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        out.push((flag, value, default, env, cell(&help)));
    }
    out
}

/// Markdown for every visible command and its options.
pub fn reference_markdown() -> String {
    let cli = Cli::command();
    let mut md = String::new();
    md.push_str(BEGIN);
    md.push_str("\n\n### Global options (any command)\n\n");
    md.push_str("| option | value | default | environment | meaning |\n|---|---|---|---|---|\n");
    for (flag, value, default, env, help) in rows(&cli) {
        md.push_str(&format!(
            "| {flag} | {value} | {default} | {env} | {help} |\n"
        ));
    }
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        md.push_str(&format!("\n### `shardfs {name}`\n\n"));
        if let Some(about) = sub.get_about() {
            md.push_str(&format!("{about}\n\n"));
        }
        let mount = name == "mount";
        if mount {
            md.push_str(
                "| option | value | default | environment | `-o` key | volume attribute | meaning |\n\
                 |---|---|---|---|---|---|---|\n",
            );
        } else {
            md.push_str(
                "| option | value | default | environment | meaning |\n|---|---|---|---|---|\n",
            );
        }
        for (a, (flag, value, default, env, help)) in sub
            .get_arguments()
            .filter(|a| !(a.is_hide_set() || a.get_id() == "help" || a.get_id() == "version"))
            .zip(rows(sub))
        {
            if mount {
                let (key, attr) = match a.get_long() {
                    Some(l) => {
                        let attr = if crate::csi::attributes::OWNED.contains(&l) {
                            "(set by the plugin)".to_string()
                        } else {
                            format!("`{}`", camel(l))
                        };
                        (format!("`{}`", l.replace('-', "_")), attr)
                    }
                    None => (String::new(), String::new()),
                };
                md.push_str(&format!(
                    "| {flag} | {value} | {default} | {env} | {key} | {attr} | {help} |\n"
                ));
            } else {
                md.push_str(&format!(
                    "| {flag} | {value} | {default} | {env} | {help} |\n"
                ));
            }
        }
    }
    md.push('\n');
    md.push_str(END);
    md.push('\n');
    md
}

/// Hidden `shardfs generate-config-reference`: prints [`reference_markdown`].
pub fn run() -> anyhow::Result<()> {
    print!("{}", reference_markdown());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_of_long_flags() {
        assert_eq!(camel("cache-limit"), "cacheLimit");
        assert_eq!(camel("shuffle"), "shuffle");
        assert_eq!(camel("no-sign-request"), "noSignRequest");
    }
}
