"""Differential check of our partitions and shuffles against upstream's own modules.

    python bench/order_diff.py CASES SEED PATH/TO/examples/order_diff

Draws random (samples, canonical nodes, nodes, ranks, workers, batch, drop_first, initial
nodes, algorithm) and (shard sizes, shuffle algorithm, seed, epoch, block size), runs upstream's
get_partitions / get_shuffle (from the installed mosaicml-streaming, loaded as in
order_upstream.py) and `cargo run --release --example order_diff` on the same inputs, and counts
mismatches (refusals must agree too).
"""
import json, os, random, sys, subprocess, warnings
warnings.simplefilter('ignore')
import logging; logging.disable(logging.CRITICAL)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
from order_upstream import load_upstream
get_partitions, get_shuffle = load_upstream()
random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
N = int(sys.argv[1])
cases = []
for _ in range(N):
    units = [random.randint(0, 80) for _ in range(random.randint(1, 15))]
    if sum(units) == 0: units[0] = 5
    n = random.choice([sum(units), random.randint(1, 400)])
    c = random.randint(1, 9); p = random.choice([c * random.randint(1, 3), max(1, c // random.randint(1, 3)), random.randint(1, 9)])
    r = random.randint(1, 4); w = random.randint(1, 3); b = random.randint(1, 6)
    ipn = random.choice([None, random.randint(1, 6)])
    d = random.choice([0, 0, random.randint(0, n + 10)])
    case = dict(n=n, c=c, p=p, r=r, w=w, b=b, d=d, ipn=ipn, algo=random.choice(['orig', 'relaxed']),
                units=units, shuffle=random.choice(['naive', 'py1s', 'py2s', 'py1br', 'py1e']),
                seed=random.randint(0, 2**32), epoch=random.randint(0, 5), bs=random.randint(1, 300))
    cases.append(case)
out = subprocess.run([sys.argv[3]], input='\n'.join(json.dumps(c) for c in cases) + '\n', capture_output=True, text=True, check=True).stdout.splitlines()
bad = 0; stats = dict(pok=0, perr=0, sok=0, serr=0)
for case, line in zip(cases, out):
    ours = json.loads(line)
    try:
        up = get_partitions(case['algo'], case['n'], case['c'], case['p'], case['r'], case['w'], case['b'], case['d'], case['ipn'])
        upp = dict(shape=list(up.shape), ids=up.flatten().tolist())
    except Exception as e:
        upp = dict(error=repr(e))
    if ('error' in upp) != ('error' in ours['partition']) or ('error' not in upp and upp != ours['partition']):
        bad += 1
        if bad < 5: print('PARTITION MISMATCH', case, upp.get('error') or upp['shape'], ours['partition'].get('error') or ours['partition']['shape'])
    else:
        stats['perr' if 'error' in upp else 'pok'] += 1
    try:
        ups = get_shuffle(case['shuffle'], np.array(case['units'], np.int64), case['c'], case['seed'], case['epoch'], case['bs']).tolist()
    except Exception as e:
        ups = dict(error=repr(e))
    os_ = ours['shuffle']
    if isinstance(ups, dict) != isinstance(os_, dict) or (not isinstance(ups, dict) and [int(x) for x in ups] != os_):
        bad += 1
        if bad < 5: print('SHUFFLE MISMATCH', case, ups if isinstance(ups, dict) else ups[:10], os_ if isinstance(os_, dict) else os_[:10])
    else:
        stats['serr' if isinstance(ups, dict) else 'sok'] += 1
print('cases', len(cases), 'mismatches', bad, stats)
