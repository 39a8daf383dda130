"""Reads datasets written by `shardfs pack` through the real StreamingDataset and compares
every sample with another dataset (the MDSWriter reference, or a single-process pack).

    python tests/pack/check_streaming.py OURS THEIRS [OURS THEIRS ...]

Needs mosaicml-streaming (and so torch); exits non-zero on the first difference.
"""
import os
import shutil
import sys
import tempfile

import numpy as np
from streaming import StreamingDataset


def samples(path):
    # StreamingDataset decompresses shards next to the compressed ones: read a copy.
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, 'ds')
        shutil.copytree(path, copy)
        ds = StreamingDataset(local=copy, batch_size=1)
        return [ds[i] for i in range(ds.num_samples)]


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, float) and a != a:
        return b != b
    if hasattr(a, 'tobytes') and hasattr(b, 'tobytes'):
        return a.tobytes() == b.tobytes()
    return a == b


def main(pairs):
    for ours, theirs in zip(pairs[::2], pairs[1::2]):
        a, b = samples(ours), samples(theirs)
        assert len(a) == len(b), f'{ours}: {len(a)} samples, {theirs}: {len(b)}'
        for i, (x, y) in enumerate(zip(a, b)):
            assert x.keys() == y.keys(), f'{ours}[{i}]: columns {x.keys()} vs {y.keys()}'
            for k in x:
                assert same(x[k], y[k]), f'{ours}[{i}][{k}]: {x[k]!r} != {y[k]!r}'
        print(f'{ours}: {len(a)} samples read through StreamingDataset equal {theirs}')


if __name__ == '__main__':
    main(sys.argv[1:])
