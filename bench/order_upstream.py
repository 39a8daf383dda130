"""Time upstream mosaicml-streaming's random-batching plan on the inputs of bench/order.rs.

Runs what StreamingDataset's local leader runs per epoch for one node (generate_work with
`random` batching: resample (identity here), get_partitions, get_shuffle, the two id maps),
then reads each rank's order the way its DataLoader would (one worker). Upstream's modules are
loaded from the installed package without executing `streaming/__init__.py` (which needs
torch); nothing is copied. Prints one JSON line with the same checksum as bench/order.rs.
"""
import importlib.util
import json
import logging
import os
import resource
import sys
import time
import types
import warnings

warnings.simplefilter('ignore')
logging.disable(logging.CRITICAL)


def load_upstream():
    spec = importlib.util.find_spec('streaming')
    if spec is None or not spec.submodule_search_locations:
        sys.exit('mosaicml-streaming is not installed in this Python')
    root = list(spec.submodule_search_locations)[0]
    for name, path in [('streaming', root), ('streaming.base', os.path.join(root, 'base'))]:
        mod = types.ModuleType(name)
        mod.__path__ = [path]
        sys.modules[name] = mod
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle
    return get_partitions, get_shuffle


def main():
    algo, n = sys.argv[1], int(sys.argv[2])
    import numpy as np
    get_partitions, get_shuffle = load_upstream()
    k = 10_000
    shard_sizes = np.array([n * (i + 1) // k - n * i // k for i in range(k)], np.int64)
    nodes, ranks, workers, batch = 1, 8, 1, 32
    ncn = 64 * nodes if algo in ('py1s', 'py2s') else nodes
    block = max(4_000_000 // ncn, 1 << 18)
    seed, epoch = 9176, 0
    t = time.perf_counter()
    cpu0 = time.process_time()
    # resample_streams for unweighted streams: units are the shards, small_per_big is arange.
    units = shard_sizes.copy()
    small_per_big = np.arange(n, dtype=np.int64)
    big_ids = get_partitions('relaxed', n, ncn, nodes, ranks, workers, batch, 0, None)
    shuffle = get_shuffle(algo, units, ncn, seed, epoch, block)
    big_ids = np.where(big_ids != -1, shuffle[big_ids], -1)
    ids = np.where(big_ids != -1, small_per_big[big_ids], -1)
    orders = [ids[0, r, 0].flatten() for r in range(ranks)]
    orders = [o[o != -1] for o in orders]
    secs = time.perf_counter() - t
    cpu = time.process_time() - cpu0
    checksum = 0
    total = 0
    for o in orders:
        pos = np.arange(1, len(o) + 1, dtype=np.uint64)
        checksum = (checksum + int(np.sum(pos * o.astype(np.uint64), dtype=np.uint64))) % (1 << 64)
        total += len(o)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({'impl': 'upstream', 'algo': algo, 'samples': n, 'seconds': round(secs, 3), 'cpu_seconds': round(cpu, 2),
                      'samples_per_sec': round(n / secs), 'peak_rss_mib': round(peak, 1),
                      'plan_ids': total, 'checksum': checksum}))


if __name__ == '__main__':
    main()
