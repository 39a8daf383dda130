"""Writes the small inputs of the pack tests (run once; its output is committed).

    python tests/pack/make_inputs.py [FORMAT...]    # needs Pillow (images), pyarrow (parquet)

With FORMAT names (jsonl, imagefolder, webdataset, parquet) it writes only those inputs, so
adding one does not rewrite the others (JPEG bytes depend on the Pillow version).

inputs/jsonl/      two JSON Lines files: ints, floats that serde_json's default parser rounds
                   one ULP off, text with escapes and non-ASCII, nested values, blank lines
inputs/imagefolder three classes of small JPEG files (one in a sub-folder)
inputs/webdataset  two tar files of samples (.jpg, .cls, .json members)
inputs/parquet     two Parquet files (snappy and zstd, several row groups): strings, binary,
                   int8..uint64, float32/float64 (the hard floats), bool, a list, a struct
                   with nulls, a map
inputs/parquet-odd Parquet files pack refuses (a timestamp column, a null in an int column)
"""
import io
import json
import os
import random
import tarfile


HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'inputs')
rng = random.Random(39)


def jpeg(seed, size=8):
    from PIL import Image
    r = random.Random(seed)
    img = Image.new('RGB', (size, size))
    img.putdata([(r.randrange(256), r.randrange(256), r.randrange(256)) for _ in range(size * size)])
    buf = io.BytesIO()
    img.save(buf, format='JPEG', quality=80)
    return buf.getvalue()


# Floats whose correctly rounded value differs from a fast approximate parse.
HARD_FLOATS = ['2.2250738585072011e-308', '0.1', '1e23', '8.98846567431158e307', '4.35e-5',
               '9007199254740993', '0.30000000000000004', '1.7976931348623157e308',
               '5e-324', '123456789012345678901234567890.5', '-0.0', '2.5e-05', '1E+16']


def jsonl():
    d = os.path.join(OUT, 'jsonl')
    os.makedirs(d, exist_ok=True)
    words = ['alpha', 'beta', 'γάμμα', 'δέλτα', 'emoji 😀', 'tab\tquote"back\\slash', 'ctl\u0001']
    rows = []
    for i in range(240):
        f = HARD_FLOATS[i % len(HARD_FLOATS)] if i % 3 == 0 else repr(rng.uniform(-1e6, 1e6))
        text = ' '.join(rng.choice(words) for _ in range(rng.randrange(1, 30)))
        meta = {'z': i % 7, 'a': [1, 2.5, None, True, 'x'], 'nested': {'k': f'v{i}'}}
        if i % 5 == 0:
            meta = [i, {'b': 1, 'a': 2}]
        # key order differs from sorted order on purpose: json.dumps keeps insertion order
        line = '{"text": %s, "id": %d, "score": %s, "meta": %s}' % (
            json.dumps(text, ensure_ascii=(i % 2 == 0)), i * 1_000_003 - 7, f, json.dumps(meta))
        rows.append(line)
    with open(os.path.join(d, 'a.jsonl'), 'w', encoding='utf-8') as fh:
        for line in rows[:150]:
            fh.write(line + '\n')
        fh.write('\n')
    with open(os.path.join(d, 'b.jsonl'), 'w', encoding='utf-8') as fh:
        fh.write('\n'.join(rows[150:]))  # no newline at the end


def imagefolder():
    d = os.path.join(OUT, 'imagefolder')
    layout = {'cat': ['c1.jpg', 'c10.jpg', 'c2.JPG', 'sub/c3.jpeg'], 'dog': ['d1.jpg', 'd2.jpg', 'notes.txt'],
              'zebra': ['z-1.jpg', 'z_0.jpg', 'z.0.jpg']}
    seed = 0
    for cls, files in layout.items():
        for f in files:
            p = os.path.join(d, cls, f)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, 'wb') as fh:
                fh.write(b'not an image' if f.endswith('.txt') else jpeg(seed, 8 + seed % 5))
            seed += 1


def webdataset():
    d = os.path.join(OUT, 'webdataset')
    os.makedirs(d, exist_ok=True)
    k = 0
    for t in range(2):
        with tarfile.open(os.path.join(d, f'shard-{t:02d}.tar'), 'w', format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(12):
                key = f'sample{k:04d}'
                members = [('jpg', jpeg(100 + k)), ('cls', str(k % 3).encode()),
                           ('json', json.dumps({'k': k, 'caption': f'picture {k}'}).encode())]
                for ext, data in members:
                    info = tarfile.TarInfo(f'{key}.{ext}')
                    info.size = len(data)
                    info.mtime = 0
                    tar.addfile(info, io.BytesIO(data))
                k += 1


def parquet():
    import pyarrow as pa
    import pyarrow.parquet as pq
    d = os.path.join(OUT, 'parquet')
    os.makedirs(d, exist_ok=True)
    r = random.Random(40)
    words = ['alpha', 'γάμμα', 'emoji 😀', 'tab\tquote"', 'ctl\u0001', '']
    schema = pa.schema([
        ('text', pa.string()), ('blob', pa.binary()), ('id', pa.int64()), ('small', pa.int8()),
        ('big', pa.uint64()), ('score', pa.float64()), ('f32', pa.float32()), ('flag', pa.bool_()),
        ('tags', pa.list_(pa.string())),
        ('meta', pa.struct([('z', pa.int32()), ('name', pa.string()), ('x', pa.float32())])),
        ('attrs', pa.map_(pa.string(), pa.int64())),
    ])
    rows = []
    for i in range(90):
        rows.append({
            'text': ' '.join(r.choice(words) for _ in range(r.randrange(0, 12))),
            'blob': bytes(r.randrange(256) for _ in range(r.randrange(0, 40))),
            'id': i * 1_000_003 - 7,
            'small': r.randrange(-128, 128),
            'big': r.choice([0, 2**63 - 1, r.randrange(2**62)]),
            'score': float(HARD_FLOATS[i % len(HARD_FLOATS)]) if i % 3 == 0 else r.uniform(-1e6, 1e6),
            'f32': r.uniform(-10, 10),
            'flag': i % 4 == 0,
            'tags': None if i % 11 == 0 else [r.choice(words) for _ in range(r.randrange(0, 4))],
            'meta': {'z': i, 'name': None if i % 3 else f'n{i}', 'x': 0.1 * i},
            'attrs': [('k%d' % j, j * i) for j in range(r.randrange(0, 3))],
        })
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table.slice(0, 50), os.path.join(d, 'a.parquet'), row_group_size=16,
                   compression='snappy')
    pq.write_table(table.slice(50), os.path.join(d, 'b.parquet'), row_group_size=25,
                   compression='zstd')


def parquet_odd():
    """Parquet files pack refuses: a timestamp column, a null in an int column."""
    import datetime
    import pyarrow as pa
    import pyarrow.parquet as pq
    d = os.path.join(OUT, 'parquet-odd')
    os.makedirs(d, exist_ok=True)
    pq.write_table(pa.table({'id': [1, 2], 'when': [datetime.datetime(2024, 1, 1)] * 2}),
                   os.path.join(d, 'timestamp.parquet'))
    pq.write_table(pa.table({'id': [1, 2, None, 4], 'text': ['a', 'b', 'c', 'd']}),
                   os.path.join(d, 'null_int.parquet'))


if __name__ == '__main__':
    import sys
    for name in sys.argv[1:] or ['jsonl', 'imagefolder', 'webdataset', 'parquet', 'parquet_odd']:
        globals()[name]()
