//! Shard hashes (MDS-SPEC §4, `streaming/base/hashing.py`): every algorithm the Python library
//! accepts, as lowercase hex. xxhash digests are printed big-endian (canonical form), hashlib
//! ones in digest byte order; `blake2b`/`blake2s` are hashlib's default 64- and 32-byte sizes.

use super::error::{MdsError, Result};
use super::index::FileRef;
use sha2::Digest;

/// Every hash name `index.json` may list, sorted.
pub const HASH_ALGOS: [&str; 17] = [
    "blake2b", "blake2s", "md5", "sha1", "sha224", "sha256", "sha384", "sha3_224", "sha3_256",
    "sha3_384", "sha3_512", "sha512", "xxh128", "xxh32", "xxh3_128", "xxh3_64", "xxh64",
];

fn hex_of<D: Digest>(data: &[u8]) -> String {
    hex::encode(D::digest(data))
}

/// The lowercase hex digest of `data` under the hash named `algo`.
pub fn hash_hex(algo: &str, data: &[u8]) -> Result<String> {
    use xxhash_rust::{xxh3, xxh32, xxh64};
    Ok(match algo {
        "md5" => hex_of::<md5::Md5>(data),
        "sha1" => hex_of::<sha1::Sha1>(data),
        "sha224" => hex_of::<sha2::Sha224>(data),
        "sha256" => hex_of::<sha2::Sha256>(data),
        "sha384" => hex_of::<sha2::Sha384>(data),
        "sha512" => hex_of::<sha2::Sha512>(data),
        "sha3_224" => hex_of::<sha3::Sha3_224>(data),
        "sha3_256" => hex_of::<sha3::Sha3_256>(data),
        "sha3_384" => hex_of::<sha3::Sha3_384>(data),
        "sha3_512" => hex_of::<sha3::Sha3_512>(data),
        "blake2b" => hex_of::<blake2::Blake2b512>(data),
        "blake2s" => hex_of::<blake2::Blake2s256>(data),
        "xxh32" => format!("{:08x}", xxh32::xxh32(data, 0)),
        "xxh64" => format!("{:016x}", xxh64::xxh64(data, 0)),
        "xxh3_64" => format!("{:016x}", xxh3::xxh3_64(data)),
        "xxh128" | "xxh3_128" => format!("{:032x}", xxh3::xxh3_128(data)),
        other => return Err(MdsError::UnknownHash(other.to_string())),
    })
}

/// Checks `data` against `file`: its length, then every listed digest whose algorithm is
/// known (unknown names are skipped). Errors name the file.
pub fn verify_hashes(file: &FileRef, data: &[u8]) -> Result<()> {
    let name = file.basename.as_str();
    if data.len() as u64 != file.bytes {
        return Err(MdsError::SizeMismatch {
            expected: file.bytes,
            actual: data.len() as u64,
        }
        .in_file(name));
    }
    for (algo, expected) in &file.hashes {
        let actual = match hash_hex(algo, data) {
            Ok(h) => h,
            Err(MdsError::UnknownHash(_)) => continue,
            Err(e) => return Err(e.in_file(name)),
        };
        if !actual.eq_ignore_ascii_case(expected) {
            return Err(MdsError::HashMismatch {
                algo: algo.clone(),
                expected: expected.clone(),
                actual,
            }
            .in_file(name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // hashlib / xxhash of b"abc".
        assert_eq!(
            hash_hex("md5", b"abc").unwrap(),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(hash_hex("xxh32", b"abc").unwrap(), "32d153ff");
        assert_eq!(hash_hex("xxh64", b"abc").unwrap(), "44bc2cf5ad770999");
        assert!(matches!(
            hash_hex("crc32", b""),
            Err(MdsError::UnknownHash(_))
        ));
    }
}
