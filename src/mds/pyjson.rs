//! JSON text exactly as Python's `json.dumps(obj, sort_keys=True)` writes it: separators
//! `", "` and `": "`, keys sorted by code point, `ensure_ascii` escapes (`\u00e9`, surrogate
//! pairs above U+FFFF). The writer needs this to reproduce MDSWriter's shard configs and
//! `index.json` byte for byte; serde_json's own output differs in spacing and escapes.

use serde_json::Value;

/// A string as `json.dumps` writes it with `ensure_ascii` (quotes included), appended to `out`.
pub(crate) fn escape(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Items between `open` and `close`, separated by `", "` as `json.dumps` separates them;
/// `each` writes one item.
fn write_joined<T>(
    open: char,
    items: impl IntoIterator<Item = T>,
    close: char,
    out: &mut String,
    mut each: impl FnMut(T, &mut String),
) {
    out.push(open);
    for (k, item) in items.into_iter().enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        each(item, out);
    }
    out.push(close);
}

/// A list as `json.dumps` writes it; `each` writes one item.
pub(crate) fn write_list<T>(
    items: impl IntoIterator<Item = T>,
    out: &mut String,
    each: impl FnMut(T, &mut String),
) {
    write_joined('[', items, ']', out, each);
}

/// A dict as `json.dumps` writes it, keys in the order given; `each` writes one value.
pub(crate) fn write_dict<'k, T>(
    items: impl IntoIterator<Item = (&'k str, T)>,
    out: &mut String,
    mut each: impl FnMut(T, &mut String),
) {
    write_joined('{', items, '}', out, |(key, value), out| {
        escape(key, out);
        out.push_str(": ");
        each(value, out);
    });
}

fn write(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => escape(s, out),
        Value::Array(items) => write_list(items, out, write),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            write_dict(keys.into_iter().map(|k| (k.as_str(), &map[k])), out, write);
        }
    }
}

/// `json.dumps(v, sort_keys=True)` (integers only; MDS configs hold no floats).
pub fn dumps_sorted(v: &Value) -> String {
    let mut out = String::new();
    write(v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_spacing_and_escapes() {
        let v = serde_json::json!({"b": [1, null], "a": "é\"\n😀"});
        assert_eq!(
            dumps_sorted(&v),
            r#"{"a": "\u00e9\"\n\ud83d\ude00", "b": [1, null]}"#
        );
    }
}
