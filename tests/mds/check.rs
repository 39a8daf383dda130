//! Independent decoders for what `render` produces (a tiny `.npy` reader, a tar reader) and the
//! comparison of one rendered column file against the `value` of `expected.jsonl`.

use base64::Engine;
use serde_json::Value;

pub fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("fixture base64")
}

/// A parsed `.npy` file: descr, shape and data.
#[derive(Debug)]
pub struct Npy {
    pub descr: String,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

/// Reads a format-1.0 `.npy` file, checking magic, header length, alignment and C order.
pub fn read_npy(bytes: &[u8]) -> Npy {
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00", "npy magic");
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).expect("npy header text");
    assert_eq!((10 + hlen) % 64, 0, "npy header alignment");
    assert!(header.ends_with('\n'));
    let field = |key: &str| {
        let at = header.find(&format!("'{key}': ")).expect(key) + key.len() + 4;
        &header[at..]
    };
    let descr = field("descr");
    let descr = descr[1..descr[1..].find('\'').unwrap() + 1].to_string();
    assert!(field("fortran_order").starts_with("False"));
    let shape = field("shape");
    let shape = &shape[1..shape.find(')').unwrap()];
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    Npy {
        descr,
        shape,
        data: bytes[10 + hlen..].to_vec(),
    }
}

/// Reads a ustar archive into (name, bytes) members.
pub fn read_tar(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let h = &bytes[pos..pos + 512];
        if h.iter().all(|&b| b == 0) {
            assert!(
                bytes[pos..].iter().all(|&b| b == 0),
                "data after end blocks"
            );
            assert_eq!(bytes.len() - pos, 1024, "two end blocks");
            return out;
        }
        assert_eq!(&h[257..263], b"ustar\0");
        let name_end = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let name = String::from_utf8(h[..name_end].to_vec()).unwrap();
        let size =
            u64::from_str_radix(std::str::from_utf8(&h[124..135]).unwrap(), 8).unwrap() as usize;
        let sum: u32 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(b)
                }
            })
            .sum();
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        assert_eq!(sum, stored, "tar checksum of {name}");
        pos += 512;
        out.push((name, bytes[pos..pos + size].to_vec()));
        pos += size.div_ceil(512) * 512;
    }
}

fn channels(mode: &str) -> u64 {
    match mode {
        "1" | "L" | "P" | "I" | "F" | "I;16" => 1,
        "LA" => 2,
        "RGB" | "YCbCr" | "HSV" => 3,
        "RGBA" | "CMYK" => 4,
        m => panic!("fixture mode {m} not covered by this test"),
    }
}

/// Checks a rendered pil `.npy` against an image value {"mode","size","b64"}.
pub fn check_pil_npy(rendered: &[u8], value: &Value) {
    let npy = read_npy(rendered);
    let mode = value["mode"].as_str().unwrap();
    let w = value["size"][0].as_u64().unwrap();
    let h = value["size"][1].as_u64().unwrap();
    assert_eq!(
        npy.shape,
        vec![h, w, channels(mode)],
        "pil shape, mode {mode}"
    );
    let pixels = b64(value["b64"].as_str().unwrap());
    if mode == "1" {
        assert_eq!(npy.descr, "|b1");
        let row = (w as usize).div_ceil(8);
        let unpacked: Vec<u8> = (0..h as usize)
            .flat_map(|y| (0..w as usize).map(move |x| (y, x)))
            .map(|(y, x)| (pixels[y * row + x / 8] >> (7 - x % 8)) & 1)
            .collect();
        assert_eq!(npy.data, unpacked);
    } else {
        let want = match mode {
            "I" => "<i4",
            "F" => "<f4",
            "I;16" => "<u2",
            _ => "|u1",
        };
        assert_eq!(npy.descr, want, "mode {mode}");
        assert_eq!(npy.data, pixels);
    }
}

fn descr_of(dtype: &str) -> &'static str {
    match dtype {
        "uint8" => "|u1",
        "int8" => "|i1",
        "uint16" => "<u2",
        "int16" => "<i2",
        "float16" => "<f2",
        "uint32" => "<u4",
        "int32" => "<i4",
        "float32" => "<f4",
        "uint64" => "<u8",
        "int64" => "<i8",
        "float64" => "<f8",
        d => panic!("dtype {d}"),
    }
}

fn float_eq(text: &str, want: f64) -> bool {
    let got: f64 = text
        .parse()
        .unwrap_or_else(|_| panic!("not a float: {text:?}"));
    (got.is_nan() && want.is_nan())
        || (got == want && got.is_sign_negative() == want.is_sign_negative())
}

fn python_float(repr: &str) -> f64 {
    match repr {
        "nan" => f64::NAN,
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        r => r.parse().unwrap(),
    }
}

/// Checks the rendered column file of a value stored under `encoding` against the fixture's
/// decoded `value`; `raw` is the stored bytes, `line` the whole expected.jsonl line.
pub fn check_value(encoding: &str, raw: &[u8], rendered: &[u8], value: &Value, line: &str) {
    let text = || std::str::from_utf8(rendered).expect("rendered text is UTF-8");
    match encoding {
        "bytes" | "pkl" => assert_eq!(rendered, raw),
        "str" => assert_eq!(text(), value.as_str().unwrap()),
        "json" => {
            let parsed: Value = serde_json::from_str(text()).expect("json column parses");
            assert_eq!(&parsed, value);
        }
        "int" | "str_int" => match value
            .as_i64()
            .map(i128::from)
            .or(value.as_u64().map(i128::from))
        {
            Some(v) => assert_eq!(text().parse::<i128>().unwrap(), v),
            // Beyond 64 bits serde_json holds an f64: compare the exact digits in the line.
            None => {
                assert!(text().bytes().all(|b| b.is_ascii_digit() || b == b'-'));
                let t = text();
                assert!(
                    line.contains(&format!("\"value\":{t}}}"))
                        || line.contains(&format!("\"value\": {t}}}")),
                    "{t}"
                );
            }
        },
        "str_float" => {
            let repr = value["float"].as_str().unwrap();
            assert_eq!(text(), repr);
            assert!(float_eq(text(), python_float(repr)) || repr == "nan");
        }
        "str_decimal" => assert_eq!(text(), value["decimal"].as_str().unwrap()),
        "jpeg" | "png" => {
            assert_eq!(rendered, raw);
            let magic: &[u8] = if encoding == "jpeg" {
                b"\xff\xd8"
            } else {
                b"\x89PNG"
            };
            assert!(rendered.starts_with(magic));
        }
        "pil" => check_pil_npy(rendered, value),
        "jpeg_array" | "jpegarray" | "list[jpeg]" | "list[png]" | "list[pil]" => {
            let members = read_tar(rendered);
            let list = value.as_array().unwrap();
            assert_eq!(members.len(), list.len());
            let ext = match encoding {
                "list[png]" => "png",
                "list[pil]" => "npy",
                _ => "jpg",
            };
            for (k, ((name, bytes), v)) in members.iter().zip(list).enumerate() {
                assert_eq!(name, &format!("{k:04}.{ext}"));
                if ext == "npy" {
                    check_pil_npy(bytes, v);
                }
            }
            if ext != "npy" {
                // The stored value is exactly a count/size table plus the member files.
                let mut rebuilt = Vec::new();
                if encoding.starts_with("list") {
                    rebuilt.extend(0u32.to_le_bytes());
                }
                rebuilt.extend((members.len() as u32).to_le_bytes());
                for (_, b) in &members {
                    rebuilt.extend((b.len() as u32).to_le_bytes());
                }
                for (_, b) in &members {
                    rebuilt.extend(b);
                }
                assert_eq!(rebuilt, raw);
            }
        }
        e if e.starts_with("ndarray") => {
            let npy = read_npy(rendered);
            assert_eq!(npy.descr, descr_of(value["dtype"].as_str().unwrap()));
            let shape: Vec<u64> = value["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(npy.shape, shape);
            assert_eq!(npy.data, b64(value["b64"].as_str().unwrap()));
        }
        _ => {
            // numpy scalars: {"dtype", "repr", "str"}; our text is numpy's str().
            assert_eq!(value["dtype"].as_str().unwrap(), encoding);
            let want = value["str"].as_str().unwrap();
            assert_eq!(text(), want, "{encoding}");
            if encoding.starts_with("float") {
                assert!(float_eq(text(), python_float(want)) || want == "nan");
            }
        }
    }
}
