"""`shardfs pack` against mosaicml-streaming's own ways of writing MDS, same input, same run.

    python bench/pack.py [--rows 200000] [--images 10000] [--procs 2] [--shardfs target/release/shardfs]

Run it with a python that has mosaicml-streaming installed (it pulls torch; use a venv outside
the repository). Rows and images are generated into a temporary folder; every contender writes
to local disk in the same folder; each row reports wall time, rate and the peak RSS of the
process tree it ran (`ru_maxrss` of the waited children):

- JSON Lines: `shardfs pack` (`--threads PROCS`) vs a script reading the file with
  `json.loads` per line into one `MDSWriter` (1 process), and vs the multiprocessing recipe of
  mosaicml-streaming's docs (parallel_dataset_conversion.ipynb: PROCS processes, each writes
  a sub-folder from its slice of the lines with `MDSWriter`, then `merge_index`);
- ImageFolder: `shardfs pack` vs a script reading each file's bytes into `MDSWriter`.

Rows: an `int`, a `float64` and a ~150-byte `str`, 1 MiB shards (the issue's workload).

With `--s3` it instead packs from the bench S3 server (bench-s3-server, run as bench/harness.py
runs it, with its emulated link: `--latency-ms`, `--bandwidth-mbps` per connection) and reports
the rate against the link measured in the same run with curl on as many connections as the pack
reads an object with (harness.py's `curl_throughput`): JSON Lines objects (parsed) and
WebDataset tars (bytes passed through), each packed to local disk. Build the server first:
`cargo build --release --example bench-s3-server`. DEST stays local: one `shardfs pack` has one
set of store flags for INPUT and DEST, and the bench server serves reads only, so an s3 -> s3
run on this machine would need one S3 server that both emulates the link and takes writes.
"""
import argparse
import io
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

ONE_PROCESS = r'''
import json, sys
from streaming import MDSWriter
src, out = sys.argv[1:3]
cols = {"id": "int", "x": "float64", "text": "str"}
with MDSWriter(out=out, columns=cols, size_limit=1 << 20) as w, open(src, encoding="utf-8") as f:
    for line in f:
        if line.strip():
            w.write(json.loads(line))
'''

RECIPE = r'''
import json, os, sys
from multiprocessing import Pool
from streaming import MDSWriter
from streaming.base.util import merge_index
src, out, procs = sys.argv[1], sys.argv[2], int(sys.argv[3])
cols = {"id": "int", "x": "float64", "text": "str"}
total = os.path.getsize(src)

def convert(k):
    lo, hi = k * total // procs, (k + 1) * total // procs
    with open(src, "rb") as f, MDSWriter(out=os.path.join(out, str(k)), columns=cols,
                                         size_limit=1 << 20) as w:
        if lo:
            f.seek(lo - 1)
            f.readline()
        while f.tell() < hi:
            line = f.readline()
            if not line:
                break
            if line.strip():
                w.write(json.loads(line))

if __name__ == "__main__":
    with Pool(processes=procs) as pool:
        for _ in pool.imap(convert, range(procs)):
            pass
    merge_index(out, keep_local=True)
'''

IMAGES = r'''
import os, sys
from streaming import MDSWriter
root, out = sys.argv[1:3]
classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
with MDSWriter(out=out, columns={"image": "jpeg", "label": "int", "path": "str"}) as w:
    for label, c in enumerate(classes):
        for d, _, files in sorted(os.walk(os.path.join(root, c))):
            for f in sorted(files):
                p = os.path.join(d, f)
                with open(p, "rb") as fh:
                    w.write({"image": fh.read(), "label": label, "path": os.path.relpath(p, root)})
'''


def run(cmd):
    """Wall seconds and peak RSS (MiB) of one command and its children."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    secs = time.perf_counter() - t
    err = p.stderr.read().decode()
    if status != 0:
        sys.exit(f'{cmd[:3]} failed: {err}')
    # ru_maxrss of wait4 covers the process and the children it waited for.
    return secs, usage.ru_maxrss / 1024


def make_rows(path, rows):
    rng = random.Random(39)
    words = 'lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor'.split()
    with open(path, 'w') as f:
        for i in range(rows):
            text = ' '.join(rng.choice(words) for _ in range(40))[:150]
            f.write(json.dumps({'id': i, 'x': rng.uniform(-1e3, 1e3), 'text': text}) + '\n')


def make_images(root, n):
    rng = random.Random(7)
    for i in range(n):
        d = os.path.join(root, f'class{i % 100:03d}')
        os.makedirs(d, exist_ok=True)
        # JPEG-sized blobs with a JPEG signature: pack stores bytes as they are.
        body = bytes(rng.getrandbits(8) for _ in range(64)) * rng.randrange(400, 800)
        with open(os.path.join(d, f'{i:07d}.jpg'), 'wb') as f:
            f.write(b'\xff\xd8\xff\xe0' + body)


def s3_bench(a, tmp):
    """`shardfs pack s3://… local` against the emulated link of the bench S3 server."""
    sys.path.insert(0, HERE)
    import harness
    root = os.path.join(tmp, 'srv')
    data = os.path.join(root, harness.BUCKET)
    os.makedirs(os.path.join(data, 'rows'))
    per = a.s3_rows // 4
    for k in range(4):
        make_rows(os.path.join(data, 'rows', f'part-{k}.jsonl'), per)
    os.makedirs(os.path.join(data, 'tars'))
    rng = random.Random(11)
    for t in range(4):
        with tarfile.open(os.path.join(data, 'tars', f'shard-{t:02d}.tar'), 'w',
                          format=tarfile.USTAR_FORMAT) as tar:
            for i in range(a.s3_tar_mb * 1024 // 4 // 100):
                for ext, body in (('jpg', b'\xff\xd8\xff\xe0' + os.urandom(rng.randrange(60_000, 140_000))),
                                  ('cls', str(i % 10).encode())):
                    info = tarfile.TarInfo(f'{t:02d}{i:06d}.{ext}')
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
    procs = harness.Procs()
    try:
        server = harness.Server(procs, a.s3_server, root, a.latency_ms, a.bandwidth_mbps, tmp,
                                'pack-s3')
        env = dict(os.environ, AWS_ACCESS_KEY_ID=harness.ACCESS_KEY,
                   AWS_SECRET_ACCESS_KEY=harness.SECRET_KEY, AWS_REGION='us-east-1')
        print(f'From s3:// (bench S3 server: {a.latency_ms:g} ms per request, '
              f'{a.bandwidth_mbps:g} Mbit/s per connection) to local disk, --threads {a.procs}')
        for name, prefix, extra in [('JSON Lines', 'rows', ['--size-limit', '1MiB']),
                                    ('WebDataset tars', 'tars', [])]:
            keys = sorted(f'{prefix}/{f}' for f in os.listdir(os.path.join(data, prefix)))
            total = sum(os.path.getsize(os.path.join(data, k)) for k in keys)
            # The link: every object at once, 6 ranged GETs each (24 connections): the ceiling.
            link = curl_link(harness, server.endpoint, keys, data)
            out = os.path.join(tmp, f'out-{prefix}')
            cmd = [a.shardfs, 'pack', f's3://{harness.BUCKET}/{prefix}', out, '--threads',
                   str(a.procs), '--endpoint-url', server.endpoint] + extra
            t = time.perf_counter()
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            secs = time.perf_counter() - t
            if p.returncode != 0:
                sys.exit(f'shardfs pack from s3 failed: {p.stderr}')
            rate = total / 1e6 / secs
            print(f'  {name}: {total / 1e6:.0f} MB in {len(keys)} objects')
            print(f'    link (curl, all objects at once, 6 connections each) {link:8.1f} MB/s')
            print(f'    shardfs pack s3:// -> local                          {rate:8.1f} MB/s  {secs:6.2f} s'
                  f'  = {rate / link:.2f}x the link')
            shutil.rmtree(out)
            # What bounds it: the same pack from local disk (no network), and for tars the
            # s3:// read alone (only the key column: member bytes are read, not stored).
            t = time.perf_counter()
            subprocess.run([a.shardfs, 'pack', os.path.join(data, prefix), out, '--threads',
                            str(a.procs)] + extra, check=True, capture_output=True)
            local = total / 1e6 / (time.perf_counter() - t)
            print(f'    shardfs pack local -> local (same files)             {local:8.1f} MB/s')
            shutil.rmtree(out)
            if prefix == 'tars':
                t = time.perf_counter()
                subprocess.run(cmd + ['--columns', '__key__:str'], env=env, check=True,
                               capture_output=True)
                read = total / 1e6 / (time.perf_counter() - t)
                print(f'    shardfs pack s3:// -> local, key column only         {read:8.1f} MB/s'
                      f'  = {read / link:.2f}x the link')
                shutil.rmtree(out)
    finally:
        procs.cleanup()


def curl_link(harness, endpoint, keys, data, per_object=6):
    """MB/s of curl reading all of `keys` at once, each object as `per_object` ranged GETs on
    connections of their own (one curl process each, started together): the most the emulated
    link and the server give parallel readers of these objects, the ceiling for a pack."""
    jobs = []
    for k in keys:
        size = os.path.getsize(os.path.join(data, k))
        step = -(-size // per_object)
        jobs += [(k, j * step, min(size, (j + 1) * step) - 1) for j in range(per_object)
                 if j * step < size]
    t0 = time.perf_counter()
    ps = []
    for k, lo, hi in jobs:
        cmd = harness.curl_base() + ['-w', '%{http_code} %{size_download}\n', '-r', f'{lo}-{hi}',
                                     '-o', '/dev/null', f'{endpoint}/{harness.BUCKET}/{k}']
        ps.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    total = 0
    for p in ps:
        out, _ = p.communicate()
        code, size_dl = out.split()
        if code not in ('200', '206'):
            sys.exit(f'curl GET returned HTTP {code}')
        total += int(size_dl)
    return total / 1e6 / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--rows', type=int, default=200_000)
    ap.add_argument('--images', type=int, default=10_000)
    ap.add_argument('--procs', type=int, default=2)
    ap.add_argument('--shardfs', default=os.path.join(HERE, '..', 'target', 'release', 'shardfs'))
    ap.add_argument('--s3', action='store_true',
                    help='only the s3:// INPUT rows, against the emulated link')
    ap.add_argument('--s3-rows', type=int, default=400_000)
    ap.add_argument('--s3-tar-mb', type=int, default=200)
    ap.add_argument('--s3-server', default=os.path.join(HERE, '..', 'target', 'release',
                                                        'examples', 'bench-s3-server'))
    ap.add_argument('--latency-ms', type=float, default=20.0)
    ap.add_argument('--bandwidth-mbps', type=float, default=800.0)
    a = ap.parse_args()
    if a.s3:
        with tempfile.TemporaryDirectory(dir=os.environ.get('TMPDIR')) as tmp:
            s3_bench(a, tmp)
        return
    py = sys.executable
    with tempfile.TemporaryDirectory(dir=os.environ.get('TMPDIR')) as tmp:
        rows = os.path.join(tmp, 'rows.jsonl')
        make_rows(rows, a.rows)
        mb = os.path.getsize(rows) / 1e6
        print(f'JSON Lines: {a.rows} rows, {mb:.1f} MB, 1 MiB shards, {a.procs} processes/threads')
        res = {}
        for name, cmd in [
            ('shardfs pack', [a.shardfs, 'pack', rows, os.path.join(tmp, 'o1'), '--size-limit',
                              '1MiB', '--threads', str(a.procs)]),
            ('python json.loads + MDSWriter, 1 process', [py, '-c', ONE_PROCESS, rows,
                                                          os.path.join(tmp, 'o2')]),
            (f'python multiprocessing recipe, {a.procs} processes',
             [py, '-c', RECIPE, rows, os.path.join(tmp, 'o3'), str(a.procs)]),
        ]:
            secs, rss = run(cmd)
            res[name] = secs
            print(f'  {name:<48} {secs:7.2f} s  {a.rows / secs:10.0f} rows/s  {mb / secs:7.1f} MB/s'
                  f'  peak RSS {rss:7.1f} MiB')
        base = res['shardfs pack']
        for name, secs in res.items():
            if name != 'shardfs pack':
                print(f'  shardfs pack is {secs / base:.1f}x {name}')
        # The two MDS outputs of one process must be the same bytes.
        same = all(open(os.path.join(tmp, 'o1', f), 'rb').read() ==
                   open(os.path.join(tmp, 'o2', f), 'rb').read()
                   for f in os.listdir(os.path.join(tmp, 'o2')))
        print(f'  shardfs pack output == MDSWriter output: {same}')
        shutil.rmtree(os.path.join(tmp, 'o1'))
        shutil.rmtree(os.path.join(tmp, 'o2'))
        shutil.rmtree(os.path.join(tmp, 'o3'))

        images = os.path.join(tmp, 'images')
        make_images(images, a.images)
        total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(images) for f in fs)
        print(f'ImageFolder: {a.images} files, {total / 1e6:.0f} MB, 100 classes, 64 MiB shards')
        res = {}
        for name, cmd in [
            ('shardfs pack', [a.shardfs, 'pack', images, os.path.join(tmp, 'i1'),
                              '--threads', str(a.procs)]),
            ('python file bytes + MDSWriter, 1 process', [py, '-c', IMAGES, images,
                                                          os.path.join(tmp, 'i2')]),
        ]:
            secs, rss = run(cmd)
            res[name] = secs
            print(f'  {name:<48} {secs:7.2f} s  {a.images / secs:10.0f} files/s'
                  f'  {total / 1e6 / secs:7.1f} MB/s  peak RSS {rss:7.1f} MiB')
        print(f'  shardfs pack is {res["python file bytes + MDSWriter, 1 process"] / res["shardfs pack"]:.1f}x'
              ' python file bytes + MDSWriter')


if __name__ == '__main__':
    main()
