"""Writes the reference outputs of the pack tests with the real mosaicml-streaming MDSWriter
(run once; its output, tests/pack/reference/, is committed and the Rust tests compare
`shardfs pack` against it byte for byte).

    python3 -m venv /tmp/venv-mds && /tmp/venv-mds/bin/pip install mosaicml-streaming==0.13.0
    /tmp/venv-mds/bin/python tests/pack/make_reference.py

Each case reads tests/pack/inputs/ the way docs/PACK.md says `shardfs pack` reads it (written
here independently, in plain Python), with the columns docs/PACK.md says are inferred, and
hands the samples to MDSWriter (Parquet rows as pyarrow's to_pylist() gives them, needs
pyarrow). jsonl-parts packs three byte-range slices of the JSON Lines
into part-00000..2 and merges them with streaming's own merge_index.
"""
import json
import os
import shutil
import tarfile

from streaming import MDSWriter
from streaming.base.util import merge_index

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, 'inputs')
REF = os.path.join(HERE, 'reference')

JSONL_COLUMNS = {'text': 'str', 'id': 'int', 'score': 'float64', 'meta': 'json'}
IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp')


def jsonl_lines():
    """(global byte offset, line) of every line of the sorted .jsonl files, as one stream."""
    d = os.path.join(INPUTS, 'jsonl')
    offset = 0
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), 'rb') as fh:
            data = fh.read()
        start = 0
        for line in data.splitlines(keepends=True):
            yield offset + start, line
            start += len(line)
        offset += len(data)


def jsonl_total():
    d = os.path.join(INPUTS, 'jsonl')
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))


def jsonl_samples(lo=0, hi=None):
    for off, line in jsonl_lines():
        if off < lo or (hi is not None and off >= hi) or not line.strip():
            continue
        yield json.loads(line.decode('utf-8'))


def write(name, columns, samples, **kw):
    out = os.path.join(REF, name)
    shutil.rmtree(out, ignore_errors=True)
    with MDSWriter(out=out, columns=columns, **kw) as w:
        for s in samples:
            w.write(s)


def imagefolder_samples():
    root = os.path.join(INPUTS, 'imagefolder')
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    for label, cls in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for f in sorted(files):
                if f.lower().endswith(IMAGE_EXTS):
                    p = os.path.join(dirpath, f)
                    with open(p, 'rb') as fh:
                        yield {'image': fh.read(), 'label': label, 'path': os.path.relpath(p, root)}


def webdataset_samples():
    d = os.path.join(INPUTS, 'webdataset')
    for name in sorted(os.listdir(d)):
        cur = None
        with tarfile.open(os.path.join(d, name)) as tar:
            for m in tar:
                if not m.isfile():
                    continue
                base = os.path.basename(m.name)
                if '.' not in base or base.startswith('.'):
                    continue
                dot = len(m.name) - len(base) + base.index('.')
                key, ext = m.name[:dot], m.name[dot + 1:].lower()
                data = tar.extractfile(m).read()
                if cur is not None and cur['__key__'] != key:
                    yield cur
                    cur = None
                if cur is None:
                    cur = {'__key__': key}
                cur[ext] = data
        if cur is not None:
            yield cur


def parquet_columns(schema):
    """The columns docs/PACK.md says a Parquet schema infers."""
    import pyarrow as pa
    cols = {}
    for f in schema:
        t = f.type
        if pa.types.is_string(t):
            cols[f.name] = 'str'
        elif pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
            cols[f.name] = 'bytes'
        elif pa.types.is_integer(t):
            cols[f.name] = 'int'
        elif pa.types.is_float32(t) or pa.types.is_float64(t):
            cols[f.name] = 'float64'
        else:
            cols[f.name] = 'json'
    return cols


def parquet_samples():
    import pyarrow.parquet as pq
    d = os.path.join(INPUTS, 'parquet')
    for name in sorted(os.listdir(d)):
        yield from pq.read_table(os.path.join(d, name)).to_pylist()


def main():
    os.makedirs(REF, exist_ok=True)
    write('jsonl', JSONL_COLUMNS, jsonl_samples(), size_limit=8192, hashes=['sha1', 'xxh3_64'])
    write('jsonl-zstd', JSONL_COLUMNS, jsonl_samples(), size_limit=8192, compression='zstd:7',
          hashes=['sha1'])
    write('imagefolder', {'image': 'jpeg', 'label': 'int', 'path': 'str'}, imagefolder_samples(),
          size_limit=2048)
    write('webdataset', {'__key__': 'str', 'jpg': 'jpeg', 'cls': 'str', 'json': 'json'},
          webdataset_samples(), size_limit=4096)
    import pyarrow.parquet as pq
    schema = pq.read_schema(os.path.join(INPUTS, 'parquet', 'a.parquet'))
    write('parquet', parquet_columns(schema), parquet_samples(), size_limit=4096)
    parts = os.path.join(REF, 'jsonl-parts')
    shutil.rmtree(parts, ignore_errors=True)
    total = jsonl_total()
    for k in range(3):
        write(f'jsonl-parts/part-{k:05d}', JSONL_COLUMNS,
              jsonl_samples(k * total // 3, (k + 1) * total // 3), size_limit=8192)
    merge_index(parts)


if __name__ == '__main__':
    main()
