//! `-o key=value,...` for `mount -t shardfs` and `/etc/fstab`: each key becomes the long
//! flag of the same name before clap parses, so both spellings mean exactly the same.
//!
//! Commas separate options, so a value that contains one (a `stream=` spec, a list) writes it
//! as `%2C`, and a literal `%` as `%25`; other `%` sequences are kept as they are. fstab itself
//! already turns `\040` into a space.

use std::ffi::OsString;

/// Generic mount(8) options that mean nothing to shardfs (or that a read-only FUSE mount
/// always has); they are accepted and dropped.
const IGNORED: &[&str] = &[
    "ro", "rw", "defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail",
    "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime", "async",
    "sync",
];

/// A `-o` key that is no option of `shardfs mount`, as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown mount option `{0}` (-o takes the long options of `shardfs mount`, e.g. \
     cache_limit=10GiB; `shardfs mount --help` lists them)"
)]
pub struct UnknownMountOption(pub String);

/// Rewrites `mount ... -o a=b,c` (also `-oa=b`) into `--a=b --c`; keys may use `_` for `-`.
/// A key that `is_flag` does not know (after that rewrite) is refused as an unknown mount
/// option, rather than left to clap, which would name a `--flag` the user never typed.
pub fn expand(
    args: Vec<OsString>,
    is_flag: impl Fn(&str) -> bool,
) -> Result<Vec<OsString>, UnknownMountOption> {
    // Only `shardfs [global flags] mount ...` takes -o.
    if !args.iter().skip(1).any(|a| a.to_str() == Some("mount")) {
        return Ok(args);
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
            Some(list) => out.extend(split(&list, &is_flag)?.into_iter().map(OsString::from)),
            None => out.push(a),
        }
    }
    Ok(out)
}

fn split(list: &str, is_flag: &impl Fn(&str) -> bool) -> Result<Vec<String>, UnknownMountOption> {
    let mut flags = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        if IGNORED.contains(&key) || key.starts_with("x-") || key == "comment" {
            continue;
        }
        let flag = key.replace('_', "-");
        if !is_flag(&flag) {
            return Err(UnknownMountOption(key.to_string()));
        }
        let key = flag;
        flags.push(match value {
            Some(v) => format!("--{key}={}", unescape(v)),
            None => format!("--{key}"),
        });
    }
    Ok(flags)
}

/// Decodes the two escapes an option value may carry: `%2C` (`,`) and `%25` (`%`).
fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let code = tail.get(1..3).map(str::to_ascii_uppercase);
        match code.as_deref() {
            Some("2C") => out.push(','),
            Some("25") => out.push('%'),
            _ => {
                out.push('%');
                rest = &tail[1..];
                continue;
            }
        }
        rest = &tail[3..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// `expand` knowing a few of the real flags.
    fn expand_known(args: Vec<OsString>) -> Result<Vec<OsString>, UnknownMountOption> {
        let known = [
            "cache-limit",
            "allow-other",
            "nodes",
            "shuffle",
            "stream",
            "x",
        ];
        expand(args, |k| known.contains(&k))
    }

    #[test]
    fn an_unknown_option_is_named_as_the_user_wrote_it() {
        let e = expand_known(strs(&[
            "shardfs",
            "mount",
            "S",
            "M",
            "-o",
            "nodes=2,foo_bar=1",
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("unknown mount option `foo_bar`"), "{e}");
    }

    #[test]
    fn options_become_flags() {
        // (command line, what clap gets), words split at spaces.
        let cases = [
            (
                "shardfs mount SRC MNT -o rw,cache_limit=1GiB,allow_other,x-systemd.automount,nodes=2",
                "shardfs mount SRC MNT --cache-limit=1GiB --allow-other --nodes=2",
            ),
            (
                "shardfs mount -oshuffle SRC MNT",
                "shardfs mount --shuffle SRC MNT",
            ),
            (
                "shardfs mount MNT -o stream=s3://b/a%2Cproportion=0.5,stream=/d/x%25y%2c,comment=x-gvfs,x=%zz%",
                "shardfs mount MNT --stream=s3://b/a,proportion=0.5 --stream=/d/x%y, --x=%zz%",
            ),
        ];
        for (line, want) in cases {
            let words = |l: &str| strs(&l.split(' ').collect::<Vec<_>>());
            assert_eq!(expand_known(words(line)), Ok(words(want)), "{line}");
        }
        let other = strs(&["shardfs", "order", "-o", "x"]);
        assert_eq!(expand_known(other.clone()), Ok(other));
    }
}
