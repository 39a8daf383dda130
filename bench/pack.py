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
runs it, with its emulated link: `--latency-ms` per request, `--bandwidth-mbps` per connection
each way) JSON Lines objects (parsed) and WebDataset tars (bytes passed through), to local disk
and to the same server (INPUT and DEST on one server: one set of store flags), and reports the
rates against the link measured in the same run with one `curl --parallel` (every request on a
connection of its own, all at once: the ceiling for parallel clients): GETs of the input
objects (6 ranges each) for s3 -> local; for s3 -> s3, those GETs and PUTs of the pack's output
(the local pack's files, those over 16 MiB in 8 MiB pieces as the multipart upload sends them)
all at once, the time the link needs to move both. Both outputs are compared byte for byte
with the local -> local pack of the same files. Every --s3 time is the median of `--repeat`
runs (default 3: the machine is shared); under each pack row, the CPU seconds per GB of input
of the pack and of the server during that (median) run, and how many of the 2 cores they kept
busy together, which says whether the cores or the link bound it. Build the server first:
`cargo build --release --example bench-s3-server`.
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
    """`shardfs pack s3://… local` and `s3://… s3://…` against the emulated link of the bench S3
    server, with the link measured by curl in the same run."""
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
        # Opaque ETags and no checksums: S3 computes those on its own machines; here they
        # would take the 2 cores the pack and curl share (MD5 of every part written).
        server = harness.Server(procs, a.s3_server, root, a.latency_ms, a.bandwidth_mbps, tmp,
                                'pack-s3', etags='opaque', checksums='none')
        global SERVER_PID
        SERVER_PID = server.proc.pid
        env = dict(os.environ, AWS_ACCESS_KEY_ID=harness.ACCESS_KEY,
                   AWS_SECRET_ACCESS_KEY=harness.SECRET_KEY, AWS_REGION='us-east-1')
        print(f'From s3:// (bench S3 server: {a.latency_ms:g} ms per request, '
              f'{a.bandwidth_mbps:g} Mbit/s per connection each way), --threads {a.procs}')
        for name, prefix, extra in [('JSON Lines', 'rows', ['--size-limit', '1MiB']),
                                    ('WebDataset tars', 'tars', [])]:
            keys = sorted(f'{prefix}/{f}' for f in os.listdir(os.path.join(data, prefix)))
            total = sum(os.path.getsize(os.path.join(data, k)) for k in keys)
            print(f'  {name}: {total / 1e6:.0f} MB in {len(keys)} objects')
            # The same pack from local disk: what bounds it without a network, and the bytes
            # every other pack of this input must write.
            local_out = os.path.join(tmp, f'local-{prefix}')
            def local_pack(_):
                if os.path.exists(local_out):
                    shutil.rmtree(local_out)
                return timed_pack([a.shardfs, 'pack', os.path.join(data, prefix), local_out,
                                   '--threads', str(a.procs)] + extra, env)
            CPU_LOG.clear()
            local = total / 1e6 / median(a.repeat, local_pack)
            local_cpu = cpu_note(total / 1e6)
            outs = sorted(os.listdir(local_out))
            out_bytes = sum(os.path.getsize(os.path.join(local_out, f)) for f in outs)
            # The link, in the same run, with as many connections as the pack keeps busy: curl
            # GETs of the input in 8 MiB ranges (12 at a time), PUTs of the output (a shard over
            # 16 MiB in 8 MiB pieces, as the multipart upload sends it; 16 at a time), and both
            # at once (28 at a time).
            gets = get_jobs(keys, data)
            puts = put_jobs(prefix, local_out, outs, tmp)
            curl = lambda jobs, at_once: median(
                a.repeat, lambda _: curl_transfers(harness, server.endpoint, jobs, at_once))
            down = total / 1e6 / curl(gets, GETS_IN_FLIGHT)
            up = out_bytes / 1e6 / curl(puts, PUTS_IN_FLIGHT)
            both_secs = curl(interleave(gets, puts), GETS_IN_FLIGHT + PUTS_IN_FLIGHT)
            both = total / 1e6 / both_secs
            print(f'    link down (curl, {GETS_IN_FLIGHT} GETs at a time)                  {down:8.1f} MB/s')
            print(f'    link up (curl, {PUTS_IN_FLIGHT} PUTs of the {out_bytes / 1e6:.0f} MB output at a time) '
                  f'{up:8.1f} MB/s')
            print(f'    link both ways (GETs and PUTs at once)               {both:8.1f} MB/s of input'
                  f'  {both_secs:6.2f} s')

            src = f's3://{harness.BUCKET}/{prefix}'
            out = os.path.join(tmp, f'out-{prefix}')
            base = [a.shardfs, 'pack', src, '--threads', str(a.procs), '--endpoint-url',
                    server.endpoint] + extra
            def to_local(r):
                if os.path.exists(out):
                    shutil.rmtree(out)
                return timed_pack(base[:3] + [out] + base[3:], env)
            CPU_LOG.clear()
            secs = median(a.repeat, to_local)
            rate = total / 1e6 / secs
            print(f'    shardfs pack s3:// -> local                          {rate:8.1f} MB/s  {secs:6.2f} s'
                  f'  = {rate / down:.2f}x the link down')
            print(f'      {cpu_note(total / 1e6)}')
            same_local = same_tree(out, local_out)
            shutil.rmtree(out)

            dest = f'packed/{prefix}'
            secs = median(a.repeat, lambda r: timed_pack(
                base[:3] + [f's3://{harness.BUCKET}/{dest}{r or ""}'] + base[3:], env))
            rate = total / 1e6 / secs
            print(f'    shardfs pack s3:// -> s3://                          {rate:8.1f} MB/s  {secs:6.2f} s'
                  f'  = {both_secs / secs:.2f}x the link both ways')
            print(f'      {cpu_note(total / 1e6)}')
            same_s3 = same_tree(os.path.join(data, dest), local_out)
            print(f'    shardfs pack local -> local (same files)             {local:8.1f} MB/s')
            print(f'      {local_cpu}')
            print(f'    output == the local pack\'s, byte for byte: s3->local {same_local}, '
                  f's3->s3 {same_s3}')
            if prefix == 'tars':
                # The s3:// read alone: only the key column (member bytes read, not stored).
                def keys_only(_):
                    if os.path.exists(out):
                        shutil.rmtree(out)
                    return timed_pack(base[:3] + [out] + base[3:] + ['--columns', '__key__:str'],
                                      env)
                secs = median(a.repeat, keys_only)
                read = total / 1e6 / secs
                print(f'    shardfs pack s3:// -> local, key column only         {read:8.1f} MB/s'
                      f'  = {read / down:.2f}x the link down')
                shutil.rmtree(out)
            shutil.rmtree(local_out)
    finally:
        procs.cleanup()


def median(n, run):
    """The median of `run(0)`, …, `run(n - 1)` (seconds)."""
    times = sorted(run(r) for r in range(max(1, n)))
    return times[len(times) // 2]


# The CPU seconds (user + system) of the last `timed_pack`: the pack's, and the bench S3
# server's over the same time (`SERVER_PID`, when set).
LAST_CPU = {'pack': 0.0, 'server': 0.0}
SERVER_PID = None
CPU_LOG = []


def proc_cpu(pid):
    """CPU seconds (user + system) process `pid` has used so far."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def timed_pack(cmd, env):
    """Wall seconds of one `shardfs pack` (its CPU and the server's go to CPU_LOG)."""
    before = proc_cpu(SERVER_PID) if SERVER_PID else 0.0
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    secs = time.perf_counter() - t
    err = p.stderr.read().decode()
    if status != 0:
        sys.exit(f'{" ".join(cmd)} failed: {err}')
    server = proc_cpu(SERVER_PID) - before if SERVER_PID else 0.0
    CPU_LOG.append((secs, usage.ru_utime + usage.ru_stime, server))
    return secs


def cpu_note(mb):
    """The median run's CPU (of the last `median` over `timed_pack`) per GB of input, pack and
    server, and of both against the wall time (2 cores: at most 2.0)."""
    runs = sorted(CPU_LOG)
    CPU_LOG.clear()
    secs, pack, server = runs[len(runs) // 2]
    gb = mb / 1e3
    return (f'CPU-s/GB pack {pack / gb:5.2f} server {server / gb:5.2f}'
            f'  (cores busy {(pack + server) / secs:.2f})')


def same_tree(a, b):
    """Whether folders `a` and `b` hold the same files with the same bytes."""
    names = sorted(os.listdir(a))
    if names != sorted(os.listdir(b)):
        return False
    for n in names:
        with open(os.path.join(a, n), 'rb') as fa, open(os.path.join(b, n), 'rb') as fb:
            if fa.read() != fb.read():
                return False
    return True


PIECE = 8 << 20
# The connections a pack keeps busy (src/pack): remote::AHEAD ranged GETs of 8 MiB in flight
# while it reads, and up to 16 shard uploads (mod.rs's MAX_UPLOADS for small shards; two
# writers of a 64 MiB shard in 8 parts each for the default size).
GETS_IN_FLIGHT = 12
PUTS_IN_FLIGHT = 16


def get_jobs(keys, data):
    """Ranged GETs of `keys` in 8 MiB pieces, as the pack reads them."""
    jobs = []
    for k in keys:
        size = os.path.getsize(os.path.join(data, k))
        jobs += [('get', k, lo, min(size, lo + PIECE) - 1) for lo in range(0, size, PIECE)]
    return jobs


def put_jobs(prefix, folder, names, tmp):
    """PUTs of the files `names` of `folder` under probe/PREFIX/, a file over 16 MiB cut in
    8 MiB pieces (each its own object, as the parts of a multipart upload)."""
    jobs = []
    pieces = os.path.join(tmp, f'pieces-{prefix}')
    os.makedirs(pieces, exist_ok=True)
    for n in names:
        path = os.path.join(folder, n)
        if os.path.getsize(path) <= 2 * PIECE:
            jobs.append(('put', f'probe/{prefix}/{n}', path))
            continue
        with open(path, 'rb') as f:
            i = 0
            while chunk := f.read(PIECE):
                p = os.path.join(pieces, f'{n}.{i}')
                with open(p, 'wb') as o:
                    o.write(chunk)
                jobs.append(('put', f'probe/{prefix}/{n}.{i}', p))
                i += 1
    return jobs


def interleave(a, b):
    """The jobs of `a` and `b` taken in turn, so both directions start at once."""
    out = []
    for i in range(max(len(a), len(b))):
        out += a[i:i + 1] + b[i:i + 1]
    return out


def curl_transfers(harness, endpoint, jobs, at_once):
    """Seconds one curl takes to run every job, `at_once` at a time (`--parallel`, each on a
    connection of its own): ('get', key, first, last) ranged GETs and ('put', key, file) PUTs."""
    cmd = ['curl', '--parallel', '--parallel-immediate', '--parallel-max', str(at_once)]
    for i, job in enumerate(jobs):
        if i:
            cmd.append('--next')
        cmd += harness.curl_base()[1:] + ['-w', '%{http_code} %{size_download} %{size_upload}\n']
        url = f'{endpoint}/{harness.BUCKET}/{job[1]}'
        if job[0] == 'get':
            cmd += ['-r', f'{job[2]}-{job[3]}', '-o', '/dev/null', url]
        else:
            cmd += ['-o', '/dev/null', '-T', job[2], url]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    lines = p.stdout.split()
    codes = lines[0::3]
    if p.returncode != 0 or len(codes) != len(jobs) or any(c not in ('200', '206') for c in codes):
        sys.exit(f'curl failed ({p.returncode}): {p.stdout[-500:]} {p.stderr[-500:]}')
    return secs


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
    ap.add_argument('--repeat', type=int, default=3,
                    help='--s3: run each measure this many times and report the median')
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
