"""Config and CSV manifest for Mountpoint's `mount_from_config` example (bench/build_mountpoint.sh).

That example mounts the objects a manifest lists instead of listing the bucket. A manifest is a
headerless CSV of `partial_key,etag,size,checksum`, where `checksum` is the base64 of the
big-endian CRC32C of the key, the ETag and the size as 8 big-endian bytes. The channel's
`manifest_checksum` is the CRC32C of all entries' fields concatenated in file order. Format read
from mountpoint-s3-fs 0.11.0 (src/manifest/csv_reader.rs and examples/create_manifest.rs); the
checks below reproduce the test vectors given there.
"""

import base64
import csv
import json
import os
import struct

_CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _CRC32C_POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data, crc=0):
    """CRC32C of `data`, continuing from `crc` (the CRC32C of the bytes before it)."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _b64(crc):
    return base64.b64encode(struct.pack(">I", crc)).decode()


def _fields(key, etag, size):
    return key.encode() + etag.encode() + struct.pack(">Q", size)


def bench_etag(st):
    """The ETag the bench S3 server sends by default, `SIZE.MTIME_NS` in hex (testkit/src/s3/bucket.rs),
    quoted as in the header: Mountpoint sends it back as `If-Match` exactly as the manifest has it."""
    return f'"{st.st_size:x}.{st.st_mtime_ns:x}"'


def write_manifest(top, path):
    """Writes the manifest of every file under `top` (keys relative to it); returns its checksum."""
    running = 0
    with open(path, "w", newline="") as f:
        out = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        for root, dirs, names in os.walk(top):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(root, name)
                st = os.stat(full)
                key = os.path.relpath(full, top)
                etag = bench_etag(st)
                fields = _fields(key, etag, st.st_size)
                out.writerow([key, etag, st.st_size, _b64(crc32c(fields))])
                running = crc32c(fields, running)
    return _b64(running)


def write_config(path, *, mountpoint, bucket, prefix, top, endpoint, workdir, cache_dir,
                 cache_limit_bytes, directory_name):
    """Writes a `mount_from_config` JSON config for one channel, the objects of `top` at `prefix`."""
    manifest = os.path.join(workdir, "mountpoint-manifest.csv")
    checksum = write_manifest(top, manifest)
    for d in ("mountpoint-metadata", "mountpoint-events"):
        os.makedirs(os.path.join(workdir, d), exist_ok=True)
    config = {
        "config_version": "0.0.1",
        "mountpoint": mountpoint,
        "region": "us-east-1",
        "endpoint_url": endpoint,
        # An explicit target: the default asks the instance-metadata address.
        "throughput_config": {"type": "Explicit", "throughput": 10.0},
        "metadata_store_dir": os.path.join(workdir, "mountpoint-metadata"),
        "event_log_dir": os.path.join(workdir, "mountpoint-events"),
        "channels": [{"directory_name": directory_name, "bucket_name": bucket,
                      "prefix": prefix, "manifest_path": manifest,
                      "manifest_checksum": checksum}],
        "loglevel": "warn,awscrt=off",
        "disk_cache": {"path": cache_dir, "limit_bytes": cache_limit_bytes},
    }
    with open(path, "w") as f:
        json.dump(config, f, indent=1)


def _self_check():
    """The vectors of mountpoint-s3-fs's csv_reader tests."""
    e1, e2 = _fields("key1", '"etag1"', 1024), _fields("key2", '"etag2"', 2048)
    assert _b64(crc32c(e1)) == "kr9zjg==", "CRC32C of one entry"
    assert crc32c(e1) == 2462020494 and crc32c(e2) == 181357319
    assert crc32c(e2, crc32c(e1)) == 2007214548, "manifest checksum of two entries"


_self_check()
