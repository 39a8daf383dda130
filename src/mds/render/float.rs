//! Decimal text of numpy float scalars, exactly as numpy 2.1 `str()` prints them (the version
//! that wrote the fixtures): the shortest digits that round-trip in the value's own width,
//! positional when `value == 0` or `1e-4 <= |value| < 1e16` (with at least one fractional
//! digit: `65500.0`), scientific otherwise with a sign and at least two exponent digits
//! (`3.4028235e+38`, `5e-324`); `nan`, `inf`, `-inf`, `-0.0`.
//!
//! f32 and f64 digits come from Rust's own shortest round-trip formatting (`{:e}`), with exact
//! ties re-broken to the even digit as numpy does. float16 has no Rust type: its digits are
//! found from its exact decimal expansion, trying 1, 2, ... significant digits and keeping the
//! first candidate that converts back to the same half (round-to-nearest-even).

/// Text of an f64 the way numpy prints `np.float64`.
pub fn f64_text(x: f64) -> String {
    let sci = ties_to_even(x, format!("{:e}", x), |s| s.parse::<f64>().ok() == Some(x));
    numpy_style(x, &sci)
}

/// Text of an f32 the way numpy prints `np.float32`.
pub fn f32_text(x: f32) -> String {
    let sci = ties_to_even(f64::from(x), format!("{:e}", x), |s| {
        s.parse::<f32>().ok() == Some(x)
    });
    numpy_style(f64::from(x), &sci)
}

/// Splits Rust `{:e}` text into (negative, significant digits, exponent).
fn split_sci(sci: &str) -> (bool, String, i32) {
    let (neg, body) = match sci.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, sci),
    };
    let (mantissa, exp) = body.split_once('e').unwrap_or((body, "0"));
    let digits = mantissa.chars().filter(|c| *c != '.').collect();
    (neg, digits, exp.parse().unwrap_or(0))
}

fn join_sci(neg: bool, digits: &str, exp: i32) -> String {
    let sign = if neg { "-" } else { "" };
    let (first, rest) = digits.split_at(1);
    if rest.is_empty() {
        format!("{sign}{first}e{exp}")
    } else {
        format!("{sign}{first}.{rest}e{exp}")
    }
}

/// When the value lies exactly halfway between two shortest candidates, numpy's Dragon4 keeps
/// the one whose last digit is even (`-135.703125` as float32 prints `-135.70312`); Rust's
/// shortest formatting rounds such ties up. `round_trips` says whether a candidate text reads
/// back as the same value.
fn ties_to_even(x: f64, sci: String, round_trips: impl Fn(&str) -> bool) -> String {
    if !x.is_finite() || x == 0.0 {
        return sci;
    }
    let (neg, digits, exp) = split_sci(&sci);
    let n = digits.len();
    // The exact decimal expansion (every binary float has a finite one; 800 digits cover f64).
    let (_, exact, exact_exp) = split_sci(&format!("{:.800e}", x.abs()));
    let exact = exact.trim_end_matches('0');
    if exact.len() != n + 1 || !exact.ends_with('5') {
        return sci;
    }
    // Candidates: the exact digits truncated to n, and that plus one unit in the last place.
    let lo = &exact[..n];
    let mut hi: Vec<u8> = lo.bytes().collect();
    let mut carry = true;
    for d in hi.iter_mut().rev() {
        if !carry {
            break;
        }
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            carry = false;
        }
    }
    let (hi, hi_exp) = if carry {
        hi.insert(0, b'1');
        hi.pop();
        (String::from_utf8(hi).unwrap_or_default(), exact_exp + 1)
    } else {
        (String::from_utf8(hi).unwrap_or_default(), exact_exp)
    };
    let last_even = |s: &str| s.bytes().last().is_some_and(|d| d % 2 == 0);
    let (even, even_exp) = if last_even(lo) {
        (lo.to_string(), exact_exp)
    } else {
        (hi, hi_exp)
    };
    let candidate = join_sci(neg, &even, even_exp);
    if round_trips(&candidate) {
        candidate
    } else {
        join_sci(neg, &digits, exp)
    }
}

/// Text of a float16 (given as its bits) the way numpy prints `np.float16`.
pub fn f16_text(bits: u16) -> String {
    let x = f16_to_f64(bits);
    if !x.is_finite() || x == 0.0 {
        return numpy_style(x, &format!("{:e}", x));
    }
    numpy_style(x, &shortest_f16(x, bits))
}

/// Adds one unit in the last place to a digit string; returns the digits and whether the
/// carry added a leading digit (`999` → `100` with the exponent one higher).
fn increment(digits: &str) -> (String, bool) {
    let mut d: Vec<u8> = digits.bytes().collect();
    for b in d.iter_mut().rev() {
        if *b == b'9' {
            *b = b'0';
        } else {
            *b += 1;
            return (String::from_utf8(d).unwrap_or_default(), false);
        }
    }
    d.insert(0, b'1');
    d.pop();
    (String::from_utf8(d).unwrap_or_default(), true)
}

/// Shortest round-trip digits of a finite, non-zero half, as Dragon4 chooses them: for each
/// length, the two decimals around the exact value are the candidates; if both read back as
/// the same half, the closer wins (an exact tie goes to the even digit), else the one that
/// does. Checking both matters at powers of two, where the interval is lopsided
/// (2^-6 prints `0.01563`, not `0.01562`).
fn shortest_f16(x: f64, bits: u16) -> String {
    let (neg, exact, exp) = split_sci(&format!("{:.800e}", x));
    let exact = exact.trim_end_matches('0');
    let reads_back = |digits: &str, e: i32| {
        join_sci(neg, digits, e).parse::<f64>().ok().map(f64_to_f16) == Some(bits)
    };
    for p in 1..=exact.len() {
        if exact.len() <= p {
            return join_sci(neg, exact, exp);
        }
        let lo = &exact[..p];
        let (hi, carried) = increment(lo);
        let hi_exp = if carried { exp + 1 } else { exp };
        let (lo_ok, hi_ok) = (reads_back(lo, exp), reads_back(&hi, hi_exp));
        let rest = &exact[p..];
        let pick_hi = match (lo_ok, hi_ok) {
            (true, true) => match rest.cmp("5") {
                std::cmp::Ordering::Greater => true,
                std::cmp::Ordering::Less => false,
                std::cmp::Ordering::Equal => lo.bytes().last().is_some_and(|d| d % 2 == 1),
            },
            (true, false) => false,
            (false, true) => true,
            (false, false) => continue,
        };
        return if pick_hi {
            join_sci(neg, &hi, hi_exp)
        } else {
            join_sci(neg, lo, exp)
        };
    }
    join_sci(neg, exact, exp)
}

/// Lays out the digits of `sci` (Rust `{:e}` text of `x`, e.g. `-1.25e-7`) as numpy does.
fn numpy_style(x: f64, sci: &str) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let (neg, mut digits, exp) = split_sci(sci);
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
    }
    let sign = if neg { "-" } else { "" };
    let abs = x.abs();
    if abs == 0.0 || (1e-4..1e16).contains(&abs) {
        let n = digits.len() as i32;
        let text = if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                format!("{digits}{}.0", "0".repeat((int_len - n) as usize))
            } else {
                let (a, b) = digits.split_at(int_len as usize);
                format!("{a}.{b}")
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{text}")
    } else {
        let (first, rest) = digits.split_at(1);
        let mant = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mant}e{esign}{:02}", exp.abs())
    }
}

/// The exact value of an IEEE binary16 number.
pub fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let frac = f64::from(bits & 0x3ff);
    let mag = match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    };
    sign * mag
}

/// The binary16 nearest to `x` (ties to even), as numpy's `astype(float16)` rounds.
pub fn f64_to_f16(x: f64) -> u16 {
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    if x.is_nan() {
        return 0x7e00;
    }
    let a = x.abs();
    if a.is_infinite() || a >= 65520.0 {
        // 65520 is halfway between 65504 and the next (unrepresentable) step: rounds to inf.
        return sign | 0x7c00;
    }
    // Scale so that the units in the last place are integers, then round half to even.
    let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let ulp_exp = if e < -14 { -24 } else { e - 10 };
    let scaled = a / 2f64.powi(ulp_exp);
    let mut m = scaled.floor();
    let rem = scaled - m;
    if rem > 0.5 || (rem == 0.5 && m % 2.0 == 1.0) {
        m += 1.0;
    }
    let m = m as u32;
    if ulp_exp == -24 {
        // Subnormal (or rounds up into the smallest normal, which the bit layout handles).
        return sign | m as u16;
    }
    // m is in [1024, 2048]; 2048 means it rounded up into the next binade.
    let (m, e) = if m >= 2048 { (m / 2, e + 1) } else { (m, e) };
    if e > 15 {
        return sign | 0x7c00;
    }
    sign | (((e + 15) as u16) << 10) | (m as u16 & 0x3ff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_examples() {
        assert_eq!(f64_text(1e16), "1e+16");
        assert_eq!(f64_text(1e-5), "1e-05");
        assert_eq!(f64_text(-0.0), "-0.0");
        assert_eq!(f64_text(0.0001), "0.0001");
        assert_eq!(f64_text(9999999999999998.0), "9999999999999998.0");
        assert_eq!(f64_text(123456789012345.6), "123456789012345.6");
        assert_eq!(f64_text(5e-324), "5e-324");
        assert_eq!(f64_text(f64::NAN), "nan");
        assert_eq!(f64_text(f64::NEG_INFINITY), "-inf");
        assert_eq!(f32_text(3.4028235e38), "3.4028235e+38");
        assert_eq!(f32_text(65504.0), "65504.0");
        assert_eq!(f32_text(-135.703125f64 as f32), "-135.70312");
        assert_eq!(f16_text(0x7bff), "65500.0");
        assert_eq!(f16_text(0x0001), "6e-08");
        assert_eq!(f16_text(0x3c00), "1.0");
        assert_eq!(f16_text(0x8000), "-0.0");
        assert_eq!(f16_text(0x2400), "0.01563");
    }

    #[test]
    fn f16_conversion_round_trips_every_finite_value() {
        for bits in 0..=u16::MAX {
            let x = f16_to_f64(bits);
            if x.is_nan() {
                continue;
            }
            assert_eq!(f64_to_f16(x), bits, "{bits:#06x}");
            // The chosen text must round-trip too.
            let t = f16_text(bits);
            if x.is_finite() {
                assert_eq!(f64_to_f16(t.parse::<f64>().unwrap()), bits, "{t}");
            }
        }
    }
}
