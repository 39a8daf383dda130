#!/usr/bin/env python3
"""Writes the malformed-input corpus (issue 13, guarantee 6) from the fixtures.

Every file here is a broken copy of a fixture file: index/*.json replace the `index.json` of
fixtures/mds/basic; shard/*.mds replace its shard.00000.mds; shard/*.mds.zstd replace the
shard.00000.mds.zstd of fixtures/mds/compressed-zstd. cases.json says, per file, what the
parser must answer (`parse`) and what `shardfs cat` must print on its one error line (`cat`),
as substrings. tests/mds/malformed.rs runs them all. Run from the repository root:
    python3 tests/malformed/make.py
Needs only the standard library and the `zstd` command for the compressed cases.
"""
import json
import os
import struct
import subprocess

ROOT = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(ROOT, "..", "fixtures", "mds")
BASIC = os.path.join(FIX, "basic")
ZSTD = os.path.join(FIX, "compressed-zstd")
cases = []


def index():
    with open(os.path.join(BASIC, "index.json")) as f:
        return json.load(f)


def put(path, data, parse, cat, sample=0, column="text"):
    full = os.path.join(ROOT, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    cases.append({"file": path, "parse": parse, "cat": cat, "sample": sample, "column": column})


def put_index(name, edit, parse, cat=None):
    ix = index()
    edit(ix)
    put(f"index/{name}.json", json.dumps(ix), parse, cat or parse)


def shard0(ix, **kv):
    ix["shards"][0].update(kv)


text = open(os.path.join(BASIC, "index.json")).read()
# Bytes that are not a valid index at all.
put("index/empty.json", "", "EOF while parsing", "EOF while parsing")
put("index/truncated.json", text[: len(text) // 2], "EOF while parsing", "EOF while parsing")
put("index/not-json.json", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "not a JSON object", "not a JSON object")
put("index/invalid-utf8.json", text.replace("shard.00000.mds", "shard.\xff.mds").encode("latin-1"),
    "invalid unicode", "invalid unicode")
put("index/top-level-array.json", "[]", "not a JSON object", "not a JSON object")
put("index/deep-nesting.json", '{"version": 2, "shards": ' + "[" * 1000 + "]" * 1000 + "}",
    "recursion limit", "recursion limit")
put_index("no-shards", lambda ix: ix.pop("shards"), "missing field `shards`")
put_index("shards-not-a-list", lambda ix: ix.update(shards={}), "invalid type")
put_index("shard-not-an-object", lambda ix: ix.update(shards=[1]), "shard 0: not a JSON object")
# Versions, formats, encodings and compressions shardfs does not know.
put_index("version-1", lambda ix: ix.update(version=1), "version")
put_index("version-string", lambda ix: ix.update(version="2"), "version")
put_index("shard-without-version", lambda ix: ix["shards"][0].pop("version"), 'shard 0: missing "version"')
put_index("unknown-format", lambda ix: shard0(ix, format="tsv"), "tsv")
put_index("unknown-encoding", lambda ix: ix["shards"][0]["column_encodings"].__setitem__(0, "bfloat16"), "bfloat16")
put_index("unknown-compression", lambda ix: shard0(ix, compression="lz4", zip_data=dict(ix["shards"][0]["raw_data"], basename="shard.00000.mds.lz4")), "lz4")
put_index("compression-without-zip-data", lambda ix: shard0(ix, compression="zstd"), "compression and zip_data must be both set")
# Counts and sizes out of range.
put_index("negative-samples", lambda ix: shard0(ix, samples=-1), "shard 0: invalid value")
put_index("samples-beyond-u32", lambda ix: shard0(ix, samples=2**40), "exceed the u32 range")
put_index("samples-as-float", lambda ix: shard0(ix, samples=1e300), "shard 0: invalid type")
put_index("raw-bytes-beyond-u32", lambda ix: ix["shards"][0]["raw_data"].update(bytes=2**33), "exceeds the u32 offsets")
# Columns that cannot be served.
put_index("column-count-mismatch", lambda ix: ix["shards"][0]["column_names"].pop(), "3 column_names, 4 column_encodings")
put_index("duplicate-column", lambda ix: ix["shards"][0]["column_names"].__setitem__(1, "blob"), "duplicate column name")
put_index("column-name-with-slash", lambda ix: ix["shards"][0]["column_names"].__setitem__(0, "../blob"), "contains '/'")
put_index("column-name-300-bytes", lambda ix: ix["shards"][0]["column_names"].__setitem__(0, "é" * 150), "longer than 200 bytes")
put_index("column-name-empty", lambda ix: ix["shards"][0]["column_names"].__setitem__(0, ""), "empty column name")
put_index("fixed-size-mismatch", lambda ix: ix["shards"][0]["column_sizes"].__setitem__(1, 4), "does not match encoding int")
# Basenames that try to leave the dataset folder.
for name, basename, why in [
    ("basename-dotdot", "../shard.00000.mds", "'..' path component"),
    ("basename-dotdot-inside", "a/../../shard.00000.mds", "'..' path component"),
    ("basename-absolute", "/etc/passwd", "absolute path"),
    ("basename-backslash", "..\\shard.00000.mds", "backslash"),
    ("basename-nul", "shard.00000.mds\u0000.png", "NUL"),
    ("basename-empty", "", "empty"),
    ("basename-dot-component", "./shard.00000.mds", "'.' path component"),
    ("basename-double-slash", "a//shard.00000.mds", "empty path component"),
]:
    put_index(name, lambda ix, b=basename: ix["shards"][0]["raw_data"].update(basename=b), why)
# Unicode look-alikes are legal names (no escape): parsing succeeds, reading says the shard
# is not there.
put_index("basename-lookalike-dotdot", lambda ix: ix["shards"][0]["raw_data"].update(basename="\u2025/shard.00000.mds"),
          None, "\u2025/shard.00000.mds")
put_index("basename-right-to-left-override", lambda ix: ix["shards"][0]["raw_data"].update(basename="shard.00000\u202esdm.mds"),
          None, "shard.00000\u202esdm.mds")

# Shard bytes (basic/shard.00000.mds: 97 samples; columns blob bytes, id int, label int, text str).
raw = open(os.path.join(BASIC, "shard.00000.mds"), "rb").read()
n = struct.unpack_from("<I", raw, 0)[0]
offsets = list(struct.unpack_from(f"<{n + 1}I", raw, 4))


def patched(at, fmt, value):
    b = bytearray(raw)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


put("shard/empty.mds", b"", "size", "size")
put("shard/truncated-in-header.mds", raw[:10], "size", "size")
put("shard/truncated-last-byte.mds", raw[:-1], "size", "size")
put("shard/trailing-garbage.mds", raw + b"\0" * 16, "size", "size")
put("shard/count-u32-max.mds", patched(0, "<I", 2**32 - 1), "offset", "offset")
put("shard/count-zero.mds", patched(0, "<I", 0), "samples", "samples")
put("shard/count-one-short.mds", patched(0, "<I", n - 1), "header has 96 samples, index.json says 97", "header has 96 samples, index.json says 97")
put("shard/first-offset-wrong.mds", patched(4, "<I", 0), "offset 4", "offset 4")
put("shard/offsets-decreasing.mds", patched(8, "<I", 1), "offset 8", "offset 8")
put("shard/offset-past-end.mds", patched(4 + 4 * n, "<I", len(raw) + 10), "header says 26897 bytes, index.json says 26887",
    "header says 26897 bytes, index.json says 26887")
s0 = offsets[0]
put("shard/column-length-u32-max.mds", patched(s0, "<I", 2**32 - 1), 'column "blob" needs 4294967295 bytes',
    'column "blob" needs 4294967295 bytes',
    column="blob")
blob_len, text_len = struct.unpack_from("<II", raw, s0)
text_at = s0 + 8 + blob_len + 8 + 8
bad = bytearray(raw)
bad[text_at] = 0xFF
put("shard/text-not-utf8.mds", bytes(bad), "invalid UTF-8", 'sample 0 column "text": str column: offset 0: invalid UTF-8')

# Compressed shards (compressed-zstd/shard.00000.mds.zstd).
zraw = open(os.path.join(ZSTD, "shard.00000.mds.zstd"), "rb").read()
put("shard/zstd-truncated.mds.zstd", zraw[: len(zraw) // 2], "size", "size")
garbage = bytearray(zraw)
for i in range(64, len(garbage) - 64, 97):
    garbage[i] ^= 0x5A
put("shard/zstd-garbage.mds.zstd", bytes(garbage), "zstd", "zstd")
unpacked = subprocess.run(["zstd", "-d", "-c"], input=zraw, capture_output=True, check=True).stdout


def padded(frame, size):
    """`frame` followed by a zstd skippable frame that brings it to exactly `size` bytes."""
    assert len(frame) + 8 <= size, (len(frame), size)
    return frame + struct.pack("<II", 0x184D2A50, size - len(frame) - 8) + b"\0" * (size - len(frame) - 8)


bomb = subprocess.run(["zstd", "-19", "-c"], input=b"\0" * (64 << 20), capture_output=True, check=True).stdout
put("shard/zstd-bomb.mds.zstd", padded(bomb, len(zraw)), "output exceeds the limit", "output exceeds the limit")
other = bytearray(unpacked)
struct.pack_into("<I", other, 0, n - 1)
repacked = subprocess.run(["zstd", "-19", "-c"], input=bytes(other), capture_output=True, check=True).stdout
put("shard/zstd-valid-but-wrong-header.mds.zstd", padded(repacked, len(zraw)), "before the previous", "before the previous")

with open(os.path.join(ROOT, "cases.json"), "w") as f:
    json.dump(cases, f, indent=1, ensure_ascii=False)
    f.write("\n")
print(len(cases), "cases")
