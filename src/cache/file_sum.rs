//! `FileSum`: the checksum the cache records of each cached shard file, and how one is
//! computed again to check the file.
//!
//! A shard's bytes are checked when they are downloaded; the cache then records a checksum of
//! them beside the file, so that at the next mount, or after the file changed under it, it can
//! tell whether the file still holds those bytes. Usually that is an xxh3-64 computed after
//! the download. Where a CRC64NVME the store keeps of the object vouched for the download (S3
//! keeps one for every upload since December 2024) and the shard is stored uncompressed, that
//! CRC already is a checksum of the file's bytes: the cache records it instead of hashing the
//! shard a second time (xxh3 was ~7 % of the daemon's CPU on a cold pass, 2026-11-28). Both run
//! at memory speed, so checking a file costs the same either way.

/// A cached shard file's recorded checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileSum {
    /// xxh3-64 (seed 0), computed by the cache.
    Xxh3(u64),
    /// CRC64NVME, the one the store keeps of the object.
    Crc64Nvme(u64),
}

impl FileSum {
    /// The names of the kinds, as the extensions of their files under `sums/`, in the order
    /// they are looked for.
    pub const EXTENSIONS: [&'static str; 2] = ["crc64nvme", "xxh3"];

    /// The xxh3-64 of `bytes`.
    pub fn xxh3_of(bytes: &[u8]) -> Self {
        FileSum::Xxh3(xxhash_rust::xxh3::xxh3_64(bytes))
    }

    /// The extension of this kind's sum files.
    pub fn extension(&self) -> &'static str {
        match self {
            FileSum::Xxh3(_) => "xxh3",
            FileSum::Crc64Nvme(_) => "crc64nvme",
        }
    }

    /// The value as its file holds it: 16 hex digits.
    pub fn to_text(self) -> String {
        let (FileSum::Xxh3(v) | FileSum::Crc64Nvme(v)) = self;
        format!("{v:016x}\n")
    }

    /// A sum read from a file with extension `extension`; `None` when either is not one.
    pub fn parse(extension: &str, text: &str) -> Option<Self> {
        let v = u64::from_str_radix(text.trim(), 16).ok()?;
        match extension {
            "xxh3" => Some(FileSum::Xxh3(v)),
            "crc64nvme" => Some(FileSum::Crc64Nvme(v)),
            _ => None,
        }
    }

    /// A hasher of the same kind, to check a file against this sum.
    pub fn hasher(&self) -> FileHasher {
        match self {
            FileSum::Xxh3(_) => FileHasher::Xxh3(Box::new(xxhash_rust::xxh3::Xxh3::new())),
            FileSum::Crc64Nvme(_) => FileHasher::Crc64Nvme(Box::new(crc_fast::Digest::new(
                crc_fast::CrcAlgorithm::Crc64Nvme,
            ))),
        }
    }
}

impl std::fmt::Display for FileSum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (FileSum::Xxh3(v) | FileSum::Crc64Nvme(v)) = self;
        write!(f, "{} {v:016x}", self.extension())
    }
}

/// Computes a [`FileSum`] of bytes given piece by piece.
pub(crate) enum FileHasher {
    Xxh3(Box<xxhash_rust::xxh3::Xxh3>),
    Crc64Nvme(Box<crc_fast::Digest>),
}

impl FileHasher {
    /// Adds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            FileHasher::Xxh3(h) => h.update(bytes),
            FileHasher::Crc64Nvme(h) => h.update(bytes),
        }
    }

    /// The sum of every byte added.
    pub fn finish(&self) -> FileSum {
        match self {
            FileHasher::Xxh3(h) => FileSum::Xxh3(h.digest()),
            FileHasher::Crc64Nvme(h) => FileSum::Crc64Nvme(h.finalize()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_computed_in_pieces_is_the_sum_of_the_whole_and_survives_its_file() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        // "123456789" is the CRC catalogue's check input for CRC-64/NVME.
        let mut check = FileSum::Crc64Nvme(0).hasher();
        check.update(b"123456789");
        assert_eq!(check.finish(), FileSum::Crc64Nvme(0xae8b_1486_0a79_9888));
        for sum in [
            FileSum::xxh3_of(&bytes),
            FileSum::Crc64Nvme(crc_fast::checksum(
                crc_fast::CrcAlgorithm::Crc64Nvme,
                &bytes,
            )),
        ] {
            let mut h = sum.hasher();
            for piece in bytes.chunks(4096 + 17) {
                h.update(piece);
            }
            assert_eq!(h.finish(), sum);
            assert_eq!(FileSum::parse(sum.extension(), &sum.to_text()), Some(sum));
        }
        assert_eq!(FileSum::parse("md5", "00"), None);
        assert_eq!(FileSum::parse("xxh3", "not hex"), None);
        // The same digits under the other kind's name are another sum.
        let x = FileSum::xxh3_of(&bytes);
        assert_ne!(FileSum::parse("crc64nvme", &x.to_text()), Some(x));
    }
}
