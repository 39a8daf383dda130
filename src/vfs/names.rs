//! File names of the tree: formatting and parsing, with no allocation of whole folders.
//!
//! Positions and sample ids are zero-padded decimal, at least 8 digits and wider only when the
//! folder holds more than 10^8 entries, so that sorting a listing by name gives read order.

/// Digits used for positions in a folder of `len` entries: max(8, digits of len-1).
pub fn width_for(len: u64) -> usize {
    let mut w = 1;
    let mut v = len.saturating_sub(1);
    while v >= 10 {
        v /= 10;
        w += 1;
    }
    w.max(8)
}

/// `NNNNNNNN.suffix`, the number padded to `width`.
pub fn file_name(number: u64, width: usize, suffix: &str) -> String {
    format!("{number:0width$}.{suffix}")
}

/// Splits `NNNNNNNN.suffix` into the number and the suffix, if the number has exactly `width`
/// digits (so each file has one name only).
pub fn parse_file_name(name: &str, width: usize) -> Option<(u64, &str)> {
    let (digits, suffix) = name.split_once('.')?;
    if digits.len() != width || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, suffix))
}

/// Parses `rank-R` into R (canonical decimal only).
pub fn parse_rank_dir(name: &str) -> Option<u64> {
    parse_prefixed(name, "rank-")
}

/// Parses `epoch-E` into E (canonical decimal only).
pub fn parse_epoch_dir(name: &str) -> Option<u64> {
    parse_prefixed(name, "epoch-")
}

fn parse_prefixed(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths() {
        assert_eq!(width_for(0), 8);
        assert_eq!(width_for(100_000_000), 8);
        assert_eq!(width_for(100_000_001), 9);
    }

    #[test]
    fn names_round_trip_and_reject_other_spellings() {
        let n = file_name(42, 8, "image.jpg");
        assert_eq!(n, "00000042.image.jpg");
        assert_eq!(parse_file_name(&n, 8), Some((42, "image.jpg")));
        assert_eq!(parse_file_name("0000042.image.jpg", 8), None);
        assert_eq!(parse_file_name("00000042", 8), None);
        assert_eq!(parse_file_name("0000004x.a", 8), None);
        assert_eq!(parse_rank_dir("rank-12"), Some(12));
        assert_eq!(parse_rank_dir("rank-012"), None);
        assert_eq!(parse_epoch_dir("epoch-0"), Some(0));
        assert_eq!(parse_epoch_dir("epoch-"), None);
    }

    #[test]
    fn lexical_order_is_numeric_order() {
        let w = width_for(123_456_789);
        let mut names: Vec<String> = [5u64, 100_000_000, 99_999_999, 0]
            .iter()
            .map(|&n| file_name(n, w, "x.bin"))
            .collect();
        names.sort();
        let back: Vec<u64> = names
            .iter()
            .map(|n| parse_file_name(n, w).unwrap().0)
            .collect();
        assert_eq!(back, vec![0, 5, 99_999_999, 100_000_000]);
    }
}
