//! `size`: byte sizes as people write them in flags, `-o` options and volume attributes
//! (`10GiB`, `512MiB`, `1.5GB`, `4096`). One parser, so `--cache-limit`, `--size-limit`, the
//! CSI plugin's flags and a volume's `cacheLimit` accept the same spellings. Pure.

/// Why a text is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// No number where the size starts.
    #[error("not a size: {0:?}")]
    NotANumber(String),
    /// A unit that is none of B, K/KiB, M/MiB, G/GiB, T/TiB, KB, MB, GB, TB.
    #[error("unknown size unit {unit:?} in {text:?} (use KiB, MiB, GiB, TiB)")]
    Unit {
        /// The unit as written.
        unit: String,
        /// The whole text.
        text: String,
    },
    /// More bytes than 64 bits count.
    #[error("size out of range: {0:?}")]
    OutOfRange(String),
}

/// Parses `10GiB`, `512MiB`, `1.5GB`, `4096` into bytes: binary units (`K`, `KiB`, …, `TiB`)
/// count in 1024s, decimal ones (`KB`, …, `TB`) in 1000s, in any case; no unit or `B` is bytes.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| SizeError::NotANumber(s.to_string()))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(SizeError::Unit {
                unit: other.to_string(),
                text: s.to_string(),
            })
        }
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(SizeError::OutOfRange(s.to_string()));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 10GiB "), Ok(10 << 30));
        assert_eq!(parse_size("1.5gb"), Ok(1_500_000_000));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert!(matches!(parse_size("lots"), Err(SizeError::NotANumber(_))));
        assert!(matches!(parse_size("3 PiB"), Err(SizeError::Unit { .. })));
        assert!(matches!(
            parse_size("99999999999TB"),
            Err(SizeError::OutOfRange(_))
        ));
    }
}
