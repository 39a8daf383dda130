//! What is mounted where, read from `/proc/self/mountinfo` (proc(5)).

use std::path::Path;

/// The filesystem mounted at a mountpoint, as `/proc/self/mountinfo` gives it.
#[derive(Debug, PartialEq)]
pub(super) struct MountEntry {
    /// The filesystem type (`fuse.shardfs` for ours).
    pub fs_type: String,
    /// The device name (the SOURCE for ours).
    pub source: String,
}

/// Whether `p` is the mount point of a mounted filesystem (per /proc/self/mountinfo).
pub(super) fn is_mountpoint(p: &Path) -> bool {
    mounted_at(p).is_some()
}

/// The filesystem mounted at `p` (the top one where several are stacked), if any.
pub(super) fn mounted_at(p: &Path) -> Option<MountEntry> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let abs = abs.to_string_lossy();
    let target = match abs.trim_end_matches('/') {
        "" => "/",
        t => t,
    };
    info.lines()
        .filter_map(parse_mountinfo_line)
        .fold(
            None,
            |top, (point, entry)| {
                if point == target {
                    Some(entry)
                } else {
                    top
                }
            },
        )
}

/// (mountpoint, entry) of one mountinfo line: `ID PARENT MAJ:MIN ROOT POINT OPTIONS
/// [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS` (proc(5)), fields octal-escaped.
fn parse_mountinfo_line(line: &str) -> Option<(String, MountEntry)> {
    let mut fields = line.split(' ');
    let point = unescape_mountinfo(fields.nth(4)?);
    let mut after_dash = fields.skip_while(|f| *f != "-").skip(1);
    let fs_type = unescape_mountinfo(after_dash.next()?);
    let source = unescape_mountinfo(after_dash.next()?);
    Some((point, MountEntry { fs_type, source }))
}

/// Undoes mountinfo's `\NNN` octal escapes (space, tab, newline, backslash).
fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let v = d.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_type_and_source_unescaped() {
        let l = "36 35 0:45 / /tmp/a\\040b rw,relatime shared:1 master:2 - fuse.shardfs s3://b/x\\040y ro";
        assert_eq!(
            parse_mountinfo_line(l),
            Some((
                "/tmp/a b".to_string(),
                MountEntry {
                    fs_type: "fuse.shardfs".into(),
                    source: "s3://b/x y".into()
                }
            ))
        );
        let l = "22 1 0:21 / /tmp/x rw - tmpfs none rw";
        assert_eq!(
            parse_mountinfo_line(l).map(|(_, e)| e.fs_type),
            Some("tmpfs".into())
        );
        assert_eq!(parse_mountinfo_line("garbage"), None);
    }
}
