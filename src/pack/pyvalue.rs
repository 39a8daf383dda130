//! JSON values as Python's `json.loads` gives them, and back as `json.dumps` writes them.
//!
//! A pack must store exactly what a Python script that feeds `json.loads(line)` to `MDSWriter`
//! stores, so this parser keeps what serde_json's `Value` would lose or change: object keys in
//! file order (a repeated key keeps its first place and takes its last value, as a `dict`
//! does), integers of any size as their decimal text (Python's `int` is unbounded), floats
//! parsed with correct rounding (Rust's `f64::from_str`, the same float64 as Python's
//! `float()`), and the `NaN`, `Infinity` and `-Infinity` literals Python accepts.
//! [`dumps`] then writes `json.dumps(obj)`: separators `", "` and `": "`, `ensure_ascii`
//! escapes, floats as `repr()`.

use crate::mds::pyjson::{escape, write_dict, write_list};
use crate::mds::render::float::f64_text;

/// A JSON value as Python holds it after `json.loads`.
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// `None`.
    Null,
    /// `True` / `False`.
    Bool(bool),
    /// An `int`, as canonical decimal text (optional `-`, no leading zeros, never `-0`).
    Int(String),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `list`.
    List(Vec<PyValue>),
    /// A `dict`, keys in insertion order.
    Dict(Vec<(String, PyValue)>),
}

impl PyValue {
    /// The Python type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            PyValue::Null => "null",
            PyValue::Bool(_) => "bool",
            PyValue::Int(_) => "int",
            PyValue::Float(_) => "float",
            PyValue::Str(_) => "str",
            PyValue::List(_) => "list",
            PyValue::Dict(_) => "dict",
        }
    }
}

/// Why a text is not JSON, and the byte offset (within the text) where that was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{fault} (column {})", .offset + 1)]
pub struct JsonError {
    /// Byte offset in the parsed text.
    pub offset: usize,
    /// What is wrong.
    pub fault: JsonFault,
}

/// What [`loads`] found wrong (the wording follows Python's `json.JSONDecodeError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonFault {
    /// More text after a complete value (also `01`, which Python reads as `0` then `1`).
    #[error("extra data after the JSON value")]
    ExtraData,
    /// Nested deeper than 512 levels.
    #[error("nesting too deep")]
    TooDeep,
    /// The text ends where a value should start.
    #[error("expecting a value, found the end")]
    EndInsteadOfValue,
    /// Something that starts no JSON value.
    #[error("expecting a value")]
    ExpectedValue,
    /// An object key that is not a double-quoted string.
    #[error("expecting a property name in double quotes")]
    ExpectedKey,
    /// No `:` after an object key.
    #[error("expecting ':' after a property name")]
    ExpectedColon,
    /// No `,` or `}` after an object member.
    #[error("expecting ',' or '}}' in an object")]
    ObjectSeparator,
    /// No `,` or `]` after an array item.
    #[error("expecting ',' or ']' in an array")]
    ArraySeparator,
    /// `\u` not followed by four hex digits.
    #[error("invalid \\u escape")]
    BadUnicodeEscape,
    /// A string with no closing quote.
    #[error("unterminated string")]
    UnterminatedString,
    /// A string whose bytes are not UTF-8.
    #[error("string is not UTF-8")]
    NotUtf8,
    /// A `\uD800`-style escape without its pair.
    #[error("unpaired surrogate escape (Python keeps it; shardfs cannot store it as UTF-8)")]
    UnpairedSurrogate,
    /// A backslash escape JSON does not have.
    #[error("invalid escape")]
    BadEscape,
    /// A raw control character inside a string.
    #[error("control character in a string")]
    ControlCharacter,
    /// A number that does not parse.
    #[error("bad number")]
    BadNumber,
}

/// Nesting deeper than this is refused (Python's own limit is near 1000 through recursion).
const MAX_DEPTH: usize = 512;

/// Parses one JSON text (surrounding whitespace allowed), as `json.loads` does.
pub fn loads(text: &[u8]) -> Result<PyValue, JsonError> {
    let mut p = Parser { s: text, i: 0 };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != text.len() {
        return Err(p.err(JsonFault::ExtraData));
    }
    Ok(v)
}

/// A top-level value of an object as [`flat_object`] hands it over: the common kinds as they
/// stand in the text, anything else parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Member<'a> {
    /// A string without escapes, as written.
    Str(&'a str),
    /// An integer literal in canonical form (no `-0`), as written.
    Int(&'a str),
    /// A float literal, parsed as [`loads`] parses it.
    Float(f64),
    /// Any other value (a string with escapes, `null`, a list…), as [`loads`] gives it.
    Other(PyValue),
}

impl Member<'_> {
    /// The value as [`loads`] would have given it.
    pub fn into_py(self) -> PyValue {
        match self {
            Member::Str(s) => PyValue::Str(s.to_owned()),
            Member::Int(t) => PyValue::Int(t.to_owned()),
            Member::Float(x) => PyValue::Float(x),
            Member::Other(v) => v,
        }
    }
}

/// Reads `text` as one JSON object whose keys hold no escape, calling `member(key, value)` for
/// each member in order, without building the object. None when `text` is not such an object
/// or `member` returns None: the caller then reads the text with [`loads`], which gives the
/// same values (or says what is wrong). A repeated key is handed over twice.
pub fn flat_object<'a>(
    text: &'a [u8],
    mut member: impl FnMut(&'a str, Member<'a>) -> Option<()>,
) -> Option<()> {
    let mut p = Parser { s: text, i: 0 };
    p.ws();
    if !p.eat(b"{") {
        return None;
    }
    p.ws();
    if !p.eat(b"}") {
        loop {
            p.ws();
            if p.s.get(p.i) != Some(&b'"') {
                return None;
            }
            let key = p.plain_string()?;
            p.ws();
            if !p.eat(b":") {
                return None;
            }
            p.ws();
            let value = match p.s.get(p.i) {
                Some(b'"') => match p.plain_string() {
                    Some(s) => Member::Str(s),
                    None => Member::Other(p.value(1).ok()?),
                },
                Some(b'-' | b'0'..=b'9') => p.number_member()?,
                _ => Member::Other(p.value(1).ok()?),
            };
            member(key, value)?;
            p.ws();
            if p.eat(b",") {
                continue;
            }
            if p.eat(b"}") {
                break;
            }
            return None;
        }
    }
    p.ws();
    (p.i == text.len()).then_some(())
}

/// A number as [`Parser::number_text`] reads it.
enum Number<'a> {
    /// An integer's canonical text.
    Int(&'a str),
    /// A float.
    Float(f64),
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, fault: JsonFault) -> JsonError {
        JsonError {
            offset: self.i,
            fault,
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<PyValue, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.err(JsonFault::TooDeep));
        }
        match self.s.get(self.i) {
            None => Err(self.err(JsonFault::EndInsteadOfValue)),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(PyValue::Str),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => {
                if self.eat(b"null") {
                    Ok(PyValue::Null)
                } else if self.eat(b"true") {
                    Ok(PyValue::Bool(true))
                } else if self.eat(b"false") {
                    Ok(PyValue::Bool(false))
                } else if self.eat(b"NaN") {
                    Ok(PyValue::Float(f64::NAN))
                } else if self.eat(b"Infinity") {
                    Ok(PyValue::Float(f64::INFINITY))
                } else {
                    Err(self.err(JsonFault::ExpectedValue))
                }
            }
        }
    }

    /// The items of a list or dict, from its opening bracket to `close`: `item` reads one,
    /// items are separated by `,` (none after the last, as Python requires), and `missing`
    /// is the fault when neither `,` nor `close` follows an item.
    fn items(
        &mut self,
        close: u8,
        missing: JsonFault,
        mut item: impl FnMut(&mut Self) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        self.i += 1;
        self.ws();
        if self.eat(&[close]) {
            return Ok(());
        }
        loop {
            self.ws();
            item(self)?;
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(&[close]) {
                return Ok(());
            }
            return Err(self.err(missing));
        }
    }

    fn object(&mut self, depth: usize) -> Result<PyValue, JsonError> {
        let mut items: Vec<(String, PyValue)> = Vec::new();
        self.items(b'}', JsonFault::ObjectSeparator, |p| {
            if p.s.get(p.i) != Some(&b'"') {
                return Err(p.err(JsonFault::ExpectedKey));
            }
            let key = p.string()?;
            p.ws();
            if !p.eat(b":") {
                return Err(p.err(JsonFault::ExpectedColon));
            }
            p.ws();
            let v = p.value(depth + 1)?;
            // A dict keeps a repeated key's first position and its last value.
            match items.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = v,
                None => items.push((key, v)),
            }
            Ok(())
        })?;
        Ok(PyValue::Dict(items))
    }

    fn array(&mut self, depth: usize) -> Result<PyValue, JsonError> {
        let mut items = Vec::new();
        self.items(b']', JsonFault::ArraySeparator, |p| {
            items.push(p.value(depth + 1)?);
            Ok(())
        })?;
        Ok(PyValue::List(items))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .s
            .get(self.i..self.i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.err(JsonFault::BadUnicodeEscape))?;
        self.i += 4;
        Ok(digits)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.i += 1;
        // Most strings hold no escape: find the closing quote with a vector search, check the
        // bytes before it, and take them whole.
        let start = self.i;
        if let Some(n) = memchr::memchr2(b'"', b'\\', &self.s[start..]) {
            let span = &self.s[start..start + n];
            // A branch-free test first (it vectorizes), the position only when one is there.
            if span.iter().fold(false, |any, &b| any | (b < 0x20)) {
                let c = span.iter().position(|&b| b < 0x20).unwrap_or(0);
                self.i = start + c;
                return Err(self.err(JsonFault::ControlCharacter));
            }
            if self.s[start + n] == b'"' {
                self.i = start + n + 1;
                return match std::str::from_utf8(span) {
                    Ok(text) => Ok(text.to_owned()),
                    Err(_) => Err(self.err(JsonFault::NotUtf8)),
                };
            }
        }
        let mut out: Vec<u8> = Vec::new();
        loop {
            let start = self.i;
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.extend_from_slice(&self.s[start..self.i]);
            match self.s.get(self.i) {
                None => return Err(self.err(JsonFault::UnterminatedString)),
                Some(b'"') => {
                    self.i += 1;
                    return String::from_utf8(out).map_err(|_| self.err(JsonFault::NotUtf8));
                }
                Some(b'\\') => {
                    self.i += 1;
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err(JsonFault::UnterminatedString));
                    };
                    self.i += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&hi) && self.eat(b"\\u") {
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(self.err(JsonFault::UnpairedSurrogate));
                                }
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            char::from_u32(code)
                                .ok_or_else(|| self.err(JsonFault::UnpairedSurrogate))?
                        }
                        _ => return Err(self.err(JsonFault::BadEscape)),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                Some(_) => return Err(self.err(JsonFault::ControlCharacter)),
            }
        }
    }

    /// A string (at its opening quote) without escapes or control characters, borrowed; None
    /// (and the position unchanged) for any other.
    fn plain_string(&mut self) -> Option<&'a str> {
        let start = self.i + 1;
        let n = memchr::memchr2(b'"', b'\\', &self.s[start..])?;
        let span = &self.s[start..start + n];
        if self.s[start + n] != b'"' || span.iter().fold(false, |any, &b| any | (b < 0x20)) {
            return None;
        }
        let text = std::str::from_utf8(span).ok()?;
        self.i = start + n + 1;
        Some(text)
    }

    /// A number for [`flat_object`]: an integer's canonical text, or a float.
    fn number_member(&mut self) -> Option<Member<'a>> {
        Some(match self.number_text().ok()? {
            Number::Int(t) => Member::Int(t),
            Number::Float(x) => Member::Float(x),
        })
    }

    fn number(&mut self) -> Result<PyValue, JsonError> {
        Ok(match self.number_text()? {
            Number::Int(t) => PyValue::Int(t.to_string()),
            Number::Float(x) => PyValue::Float(x),
        })
    }

    /// A number: an integer's canonical text (borrowed from the input but for `-0`), or a
    /// float.
    fn number_text(&mut self) -> Result<Number<'a>, JsonError> {
        let start = self.i;
        let neg = self.eat(b"-");
        if neg && self.eat(b"Infinity") {
            return Ok(Number::Float(f64::NEG_INFINITY));
        }
        let digits = |p: &mut Self| {
            let from = p.i;
            while let Some(b'0'..=b'9') = p.s.get(p.i) {
                p.i += 1;
            }
            p.i - from
        };
        let int_start = self.i;
        match digits(self) {
            0 => return Err(self.err(JsonFault::ExpectedValue)),
            n if n > 1 && self.s[int_start] == b'0' => {
                // Python parses `01` as `0` followed by extra data.
                self.i = int_start + 1;
                return Err(self.err(JsonFault::ExtraData));
            }
            _ => {}
        }
        let mut is_float = false;
        if self.s.get(self.i) == Some(&b'.') && matches!(self.s.get(self.i + 1), Some(b'0'..=b'9'))
        {
            self.i += 1;
            digits(self);
            is_float = true;
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            let save = self.i;
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            if digits(self) == 0 {
                self.i = save;
            } else {
                is_float = true;
            }
        }
        // The scanned text is ASCII digits and signs.
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("0");
        if is_float {
            let x: f64 = text.parse().map_err(|_| self.err(JsonFault::BadNumber))?;
            Ok(Number::Float(x))
        } else {
            let body = text.trim_start_matches('-');
            if body.bytes().all(|b| b == b'0') {
                Ok(Number::Int("0"))
            } else {
                Ok(Number::Int(text))
            }
        }
    }
}

/// `repr(x)` of a Python float, as `json.dumps` writes it (`NaN`, `Infinity`, `-Infinity`
/// for the non-finite ones).
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x == f64::INFINITY {
        "Infinity".into()
    } else if x == f64::NEG_INFINITY {
        "-Infinity".into()
    } else {
        f64_text(x)
    }
}

/// `json.dumps(v)` with Python's defaults, appended to `out`.
pub fn dumps(v: &PyValue, out: &mut String) {
    match v {
        PyValue::Null => out.push_str("null"),
        PyValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        PyValue::Int(t) => out.push_str(t),
        PyValue::Float(x) => out.push_str(&float_repr(*x)),
        PyValue::Str(s) => escape(s, out),
        PyValue::List(items) => write_list(items, out, dumps),
        PyValue::Dict(items) => write_dict(items.iter().map(|(k, v)| (k.as_str(), v)), out, dumps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(text: &str) -> String {
        let mut out = String::new();
        dumps(&loads(text.as_bytes()).unwrap(), &mut out);
        out
    }

    #[test]
    fn python_dumps_of_loads() {
        assert_eq!(
            round(r#"{"b":1,"a":[1.0,-0,1e2,1E-7,12345678901234567890123],"b":"é😀\u0041"}"#),
            r#"{"b": "\u00e9\ud83d\ude00A", "a": [1.0, 0, 100.0, 1e-07, 12345678901234567890123]}"#
        );
        assert_eq!(
            round("[NaN, -Infinity, 0.1, 1e16]"),
            "[NaN, -Infinity, 0.1, 1e+16]"
        );
    }

    #[test]
    fn flat_objects_read_as_loads_reads_them() {
        let lines = [
            r#"{"a": 1, "b": -0, "c": 2.50, "d": "x\"y", "e": [1, {"f": null}], "g": "plain"}"#,
            " {\"n\":NaN,\"i\":-Infinity,\"big\":123456789012345678901234567890,\"e\":1E3}\r\n",
            r#"{"s": "é😀", "t": true, "u": "\u0041"}"#,
            "{}",
        ];
        for line in lines {
            let mut got = Vec::new();
            flat_object(line.as_bytes(), |k, v| {
                got.push((k.to_string(), v.into_py()));
                Some(())
            })
            .unwrap_or_else(|| panic!("{line:?} not read"));
            let Ok(PyValue::Dict(want)) = loads(line.as_bytes()) else {
                panic!("{line:?}")
            };
            // NaN is not equal to itself: compare the rendered text.
            let (mut a, mut b) = (String::new(), String::new());
            dumps(&PyValue::Dict(got), &mut a);
            dumps(&PyValue::Dict(want), &mut b);
            assert_eq!(a, b);
        }
        // Not flat objects (or not JSON): left to `loads`.
        for line in [
            r#"{"a\u0041": 1}"#,
            "[1]",
            r#"{"a": 1,}"#,
            "{\"a\": \"x\u{1}\"}",
            "{} x",
        ] {
            assert!(
                flat_object(line.as_bytes(), |_, _| Some(())).is_none(),
                "{line}"
            );
        }
    }

    #[test]
    fn refuses_what_python_refuses() {
        for bad in ["", "{", "[1,]", "01", "{'a':1}", "\"\\x\"", "[1] 2", "tru"] {
            assert!(loads(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
