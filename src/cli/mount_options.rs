//! `-o key=value,...` for `mount -t shardfs` and `/etc/fstab`: each key becomes the long
//! flag of the same name before clap parses, so both spellings mean exactly the same.

use std::ffi::OsString;

/// Generic mount(8) options that mean nothing to shardfs (or that a read-only FUSE mount
/// always has); they are accepted and dropped.
const IGNORED: &[&str] = &[
    "ro", "rw", "defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail",
    "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime", "async",
    "sync",
];

/// Rewrites `mount ... -o a=b,c` (also `-oa=b`) into `--a=b --c`; keys may use `_` for `-`.
pub fn expand(args: Vec<OsString>) -> Vec<OsString> {
    // Only `shardfs [global flags] mount ...` takes -o.
    if !args.iter().skip(1).any(|a| a.to_str() == Some("mount")) {
        return args;
    }
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let text = a.to_str().map(str::to_owned);
        let opts = match text.as_deref() {
            Some("-o") => match it.next() {
                Some(v) => v.to_str().map(str::to_owned),
                None => {
                    out.push(a);
                    continue;
                }
            },
            Some(s) if s.starts_with("-o") && s.len() > 2 => Some(s[2..].to_owned()),
            _ => None,
        };
        match opts {
            Some(list) => out.extend(split(&list).into_iter().map(OsString::from)),
            None => out.push(a),
        }
    }
    out
}

fn split(list: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        if IGNORED.contains(&key) || key.starts_with("x-") {
            continue;
        }
        let key = key.replace('_', "-");
        flags.push(match value {
            Some(v) => format!("--{key}={v}"),
            None => format!("--{key}"),
        });
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_become_flags() {
        let got = expand(strs(&[
            "shardfs",
            "mount",
            "SRC",
            "MNT",
            "-o",
            "rw,cache_limit=1GiB,allow_other,x-systemd.automount,nodes=2",
        ]));
        assert_eq!(
            got,
            strs(&[
                "shardfs",
                "mount",
                "SRC",
                "MNT",
                "--cache-limit=1GiB",
                "--allow-other",
                "--nodes=2"
            ])
        );
        let got = expand(strs(&["shardfs", "mount", "-oshuffle", "SRC", "MNT"]));
        assert_eq!(got, strs(&["shardfs", "mount", "--shuffle", "SRC", "MNT"]));
        let other = strs(&["shardfs", "order", "-o", "x"]);
        assert_eq!(expand(other.clone()), other);
    }
}
