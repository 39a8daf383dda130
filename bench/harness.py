#!/usr/bin/env python3
"""shardfs benchmark harness: shardfs beside local disk, StreamingDataset, s3fs and rclone.

Run through `bench/run.sh` (which builds the Rust parts first); see bench/README.md.
One run: generate (or reuse) a dataset in two layouts (MDS, one object per sample), serve it
from the bench S3 server with an emulated remote link, measure its raw GET speed with curl,
then read the same samples through each system, cold and warm, with the same reader
(bench/reader.py; StreamingDataset through its own DataLoader). Prints a table with ratios
against local disk (a) and StreamingDataset (c) of the same pass and writes JSON to bench/out/.
Standard library only.
"""

import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ACCESS_KEY, SECRET_KEY, BUCKET = "bench", "benchsecret", "bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
ALL_SYSTEMS = ["local", "shardfs", "streaming", "s3fs", "rclone", "mountpoint", "egress", "jpeg"]
# Cache limits of the egress comparison, as fractions of the dataset's shard bytes.
EGRESS_LIMITS = (0.25, 1.0)


class BenchError(Exception):
    """A failure that ends the run with a message and a non-zero exit."""


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes and /proc

class Procs:
    """Every process and mount this run starts, so `cleanup` can undo them (and only them)."""

    def __init__(self):
        self.procs, self.mounts = [], []

    def start(self, cmd, **kw):
        log("start: " + " ".join(cmd))
        p = subprocess.Popen(cmd, **kw)
        self.procs.append(p)
        return p

    def stop(self, p, timeout=20):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def unmount(self, mnt):
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
            if os.path.ismount(mnt):
                time.sleep(0.5)
                subprocess.run(["fusermount3", "-u", "-z", mnt], stderr=subprocess.DEVNULL)
        if mnt in self.mounts:
            self.mounts.remove(mnt)

    def cleanup(self):
        for m in list(self.mounts):
            try:
                self.unmount(m)
            except OSError as e:  # e.g. no fusermount3: still stop the processes below
                log(f"unmounting {m}: {e}")
                self.mounts.remove(m)
        for p in reversed(self.procs):
            self.stop(p, timeout=10)


def read_stat(path):
    """(name, fields from field 3 on) of a `/proc/.../stat` file: fields[0] is field 3
    (state), utime=fields[11], stime=[12], cutime=[13], cstime=[14], minflt=[7]."""
    with open(path) as f:
        head, rest = f.read().rsplit(")", 1)
    return head.split("(", 1)[1], rest.split()


def proc_cpu_s(pid):
    """utime + stime (+ reaped children) of a live process, in seconds."""
    try:
        fields = read_stat(f"/proc/{pid}/stat")[1]
        return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def machine_cpu_ticks():
    """(busy, all, iowait) clock ticks of every CPU of the machine so far, from /proc/stat:
    busy is user + nice + system + irq + softirq; all adds idle, iowait and steal."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        busy = v[0] + v[1] + v[2] + v[5] + v[6]
        return busy, busy + v[3] + v[4] + v[7], v[4]
    except (OSError, IndexError, ValueError):
        return None


def cpus_in(before, after, field):
    """How many of the machine's CPUs spent their time in `field` of machine_cpu_ticks() (0:
    busy, 2: idle waiting for I/O) on average between two of its readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[field] - before[field]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def proc_minflt(pid):
    """Minor page faults of a live process so far (each maps a page, a fresh one zeroed)."""
    try:
        return int(read_stat(f"/proc/{pid}/stat")[1][7])
    except (OSError, IndexError, ValueError):
        return None


def proc_thread_cpu_s(pid):
    """utime + stime of each live thread of a process, in seconds, summed by thread name with
    a trailing number cut ("fuser-3" counts as "fuser-N"): where a daemon's CPU goes."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            name, fields = read_stat(f"/proc/{pid}/task/{tid}/stat")
            name = re.sub(r"-?\d+$", "-N", name)
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            continue
    return out


def proc_hwm_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def reset_hwm(pid):
    """Resets the peak RSS counter (clear_refs 5), so each pass reports its own peak."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return True
    except OSError:
        return False


def read_tree(path):
    """Reads every file under `path` (to put the server's data in the page cache)."""
    buf = bytearray(1 << 20)
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise BenchError(f"timed out after {timeout}s waiting for {what}")


# ---------------------------------------------------------------- the S3 server

class Server:
    """The bench S3 server (bench-s3-server: testkit/src/s3) over `root`, with the given link emulation."""

    def __init__(self, procs, binary, root, latency_ms, bandwidth_mbps, logdir, name,
                 etags="multipart", checksums="crc64nvme"):
        self.out = open(os.path.join(logdir, f"{name}.out"), "w+")
        self.err = open(os.path.join(logdir, f"{name}.err"), "w")
        self.proc = procs.start(
            [binary, root, "--latency-ms", str(latency_ms), "--bandwidth-mbps",
             str(bandwidth_mbps), "--etags", etags, "--checksums", checksums],
            stdout=self.out, stderr=self.err)
        self.endpoint = None

        def ready():
            if self.proc.poll() is not None:
                raise BenchError(f"bench S3 server exited; see {self.err.name}")
            self.out.seek(0)
            text = self.out.read()
            if "listening on " in text:
                self.endpoint = text.split("listening on ", 1)[1].split()[0]
                return True
            return False

        # It hashes every object (ETag and CRC64NVME) before it listens: on a cold page
        # cache and a slow disk, 2 GB took longer than 30 s once (2026-11-29).
        wait_for(ready, 120, "the bench S3 server")

    def stats(self):
        out = subprocess.run(["curl", "-sf", f"{self.endpoint}/__bench/stats"],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise BenchError(f"cannot read server stats from {self.endpoint}")
        return json.loads(out.stdout)

    def cpu_s(self):
        return proc_cpu_s(self.proc.pid)


def curl_base():
    return ["curl", "-s", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
            f"{ACCESS_KEY}:{SECRET_KEY}", "-H", "x-amz-content-sha256:UNSIGNED-PAYLOAD"]


def curl_throughput(endpoint, keys_per_stream, byte_range=None):
    """Parallel curl processes, each fetching its keys over one kept-alive connection
    (`byte_range`: only those bytes of each, as "first-last")."""
    t0 = time.perf_counter()
    procs = []
    for keys in keys_per_stream:
        cmd = curl_base() + ["-w", "%{http_code} %{size_download}\n"]
        if byte_range:
            cmd += ["-r", byte_range]
        for k in keys:
            cmd += ["-o", "/dev/null", f"{endpoint}/{BUCKET}/{k}"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    total = objects = 0
    for p in procs:
        out, _ = p.communicate()
        for line in out.split("\n"):
            if line.strip():
                code, size = line.split()
                if code not in ("200", "206"):
                    raise BenchError(f"curl GET returned HTTP {code} from {endpoint}")
                total += int(size)
                objects += 1
    wall = time.perf_counter() - t0
    return {"streams": len(keys_per_stream), "objects": objects, "bytes": total,
            "wall_s": wall, "mb_per_s": total / wall / 1e6, "objects_per_s": objects / wall}


def measure_server(server, layout, streams, label, fetch_connections=0, part_bytes=0):
    """curl's speed: one shard, `streams` shards at once, sample objects on `streams`
    kept-alive connections and, when given, shards on shardfs's own connection count and the
    time of one ranged GET of shardfs's part size on a new connection (a round trip plus one
    part's transfer: what the first file of a cold epoch needs at the least, plus the round
    trip of the shard header's GET before it)."""
    shards = sorted(k for k in layout["mds_keys"] if k.endswith(".mds"))
    big = max(shards, key=lambda k: layout["sizes"][k])
    samples = layout["plain_keys"]
    per = max(1, min(200, len(samples) // streams))
    rows = {}
    if part_bytes:
        rows["part_1_request"] = curl_throughput(server.endpoint, [[big]],
                                                 f"0-{part_bytes - 1}")
    rows |= {
        "shard_1_stream": curl_throughput(server.endpoint, [[big]]),
        f"shards_{streams}_streams": curl_throughput(
            server.endpoint, [[shards[i % len(shards)]] for i in range(streams)]),
        f"samples_{streams}_streams": curl_throughput(
            server.endpoint, [samples[i * per:(i + 1) * per] for i in range(streams)]),
    }
    if fetch_connections and fetch_connections != streams:
        rows[f"shards_{fetch_connections}_streams"] = curl_throughput(
            server.endpoint, [[shards[i % len(shards)]] for i in range(fetch_connections)])
    for name, r in rows.items():
        log(f"curl {label} {name}: {r['mb_per_s']:.0f} MB/s, {r['objects_per_s']:.0f} objects/s")
    return rows


def shardfs_arg_value(shardfs_args, flag, default):
    """The value of `flag` among the extra `shardfs mount` arguments, else `default`."""
    value = default
    for a, b in zip(shardfs_args, shardfs_args[1:] + [""]):
        if a.startswith(flag + "="):
            value = a.split("=", 1)[1]
        elif a == flag and b:
            value = b
    return value


def shardfs_part_bytes(shardfs_args):
    """The --fetch-part-size of the shardfs mounts, in bytes (8 MiB unless given)."""
    v = str(shardfs_arg_value(shardfs_args, "--fetch-part-size", "8MiB")).strip()
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "K": 1 << 10, "M": 1 << 20,
             "G": 1 << 30, "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3}
    for u in sorted(units, key=len, reverse=True):
        if v.endswith(u):
            return int(float(v[:-len(u)]) * units[u])
    return int(v)


def shardfs_connections(shardfs_args):
    """How many connections a shardfs mount opens at most: two per --fetch-concurrency."""
    return 2 * int(shardfs_arg_value(shardfs_args, "--fetch-concurrency", "8"))


# ---------------------------------------------------------------- dataset

def generated_once(marker, params, generate):
    """What `generate()` reported when it last ran with these `params` (kept in `marker`);
    runs it (and records the result) when the parameters differ or nothing is recorded."""
    try:
        with open(marker) as f:
            old = json.load(f)
        if old.get("params") == params:
            return old["generated"]
    except (OSError, ValueError, KeyError):
        pass
    gen = generate()
    with open(marker, "w") as f:
        json.dump({"params": params, "generated": gen}, f)
    return gen


def dataset(args, bins):
    """Generates the dataset unless one with the same parameters is there; returns its layout."""
    params = {"samples": args.samples, "mean_bytes": args.mean_bytes, "seed": args.seed,
              "classes": args.classes, "shard_bytes": args.shard_bytes, "version": 1}
    if args.hashes:  # only then, so the default dataset's parameters stay as they were
        params["hashes"] = args.hashes
    root = os.path.join(args.data_dir, "s3root")
    out = os.path.join(root, BUCKET)

    def generate():
        log(f"generating {args.samples} samples of ~{args.mean_bytes} bytes in {out}")
        os.makedirs(out, exist_ok=True)
        t0 = time.perf_counter()
        res = subprocess.run(
            [bins["gen"], "--out", out, "--samples", str(args.samples), "--mean-bytes",
             str(args.mean_bytes), "--classes", str(args.classes), "--shard-bytes",
             str(args.shard_bytes), "--seed", str(args.seed)]
            + (["--hashes", args.hashes] if args.hashes else []),
            capture_output=True, text=True)
        if res.returncode != 0:
            raise BenchError(f"bench-gen failed: {res.stderr.strip()}")
        gen = json.loads(res.stdout)
        gen["seconds"] = time.perf_counter() - t0
        return gen

    gen = generated_once(os.path.join(args.data_dir, "params.json"), params, generate)
    log(f"dataset in {out}")
    sizes, mds_keys, plain_keys = {}, [], []
    for sub, keys in (("mds", mds_keys), ("plain", plain_keys)):
        for r, _, files in os.walk(os.path.join(out, sub)):
            for name in files:
                key = os.path.relpath(os.path.join(r, name), out)
                keys.append(key)
                sizes[key] = os.path.getsize(os.path.join(out, key))
    mds_keys.sort()
    plain_keys.sort()
    return {"root": root, "dir": out, "params": params, "generated": gen, "sizes": sizes,
            "mds_keys": mds_keys, "plain_keys": plain_keys}


def jpeg_dataset(args, py, layout):
    """The JPEG dataset next to the main one (BUCKET/jpeg/{plain,mds}), made by jpeg_gen.py
    unless one with the same parameters is there."""
    params = {"samples": args.jpeg_samples, "seed": args.seed, "version": 1}
    out = os.path.join(layout["dir"], "jpeg")

    def generate():
        log(f"generating {args.jpeg_samples} JPEG samples in {out}")
        shutil.rmtree(out, ignore_errors=True)
        res = subprocess.run([py, os.path.join(HERE, "jpeg_gen.py"), "--out", out, "--samples",
                              str(args.jpeg_samples), "--seed", str(args.seed)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise BenchError(f"jpeg_gen.py failed: {_last(res.stderr)}")
        return json.loads(res.stdout)

    gen = generated_once(os.path.join(args.data_dir, "jpeg-params.json"), params, generate)
    return {"dir": out, "generated": gen}


# ---------------------------------------------------------------- one pass

def sample_list_plain(top, seed):
    """ImageFolder listing of `top` in a seeded shuffled order (DataLoader shuffle=True)."""
    t0 = time.perf_counter()
    files = []
    for r, dirs, names in os.walk(top):
        dirs.sort()
        files += [os.path.join(r, n) for n in sorted(names) if n.endswith(".bin")]
    list_s = time.perf_counter() - t0
    random.Random(seed).shuffle(files)
    return [[f] for f in files], list_s


def sample_list_shardfs(folder):
    """`rank-R/epoch-E/` in sorted order, files grouped by position (the read order)."""
    t0 = time.perf_counter()
    names = sorted(os.listdir(folder))
    list_s = time.perf_counter() - t0
    samples, last = [], None
    for n in names:
        pos = n.split(".", 1)[0]
        if pos != last:
            samples.append([])
            last = pos
        samples[-1].append(os.path.join(folder, n))
    return samples, list_s


class Runner:
    def __init__(self, args, bins, layout, procs, server, workdir):
        self.args, self.bins, self.layout = args, bins, layout
        self.procs, self.server, self.workdir = procs, server, workdir
        self.rows, self.notes = [], []
        self.can_drop = None
        # Random O_DIRECT reads of the shardfs cache files after the warm pass (disk_ceiling).
        self.disk_ceiling = None

    def prepare(self, pass_name, prewarm):
        """Drops the page cache (where permitted) and re-reads what the server serves."""
        if self.args.no_drop_caches:
            return False
        dropped = drop_caches()
        if self.can_drop is None:
            self.can_drop = dropped
            if not dropped:
                self.notes.append("page cache NOT dropped (no permission): cold rows are warm")
        if dropped and prewarm:
            read_tree(prewarm)
        return dropped

    def read(self, system, pass_name, lister, serve_pid=None, extra=None, repeat=1,
             settle=None, disk_of=None, status=None):
        """Lists (`lister()` -> samples, seconds) and reads one pass; counts both. `repeat`:
        how many times the list holds the dataset (a longer pass when one is too short to time).
        `settle()`, if given, runs after the readers end and before the counters are read (the
        pass's speed is the readers' own; serving CPU includes the settling). `disk_of`: a
        folder whose disk is watched while the readers run (see DiskTimeline), with the
        mount's `status` file polled beside it."""
        before = self._snap(serve_pid)
        samples, list_s = lister()
        manifest = os.path.join(self.workdir, f"manifest-{system}-{pass_name}.txt")
        with open(manifest, "w") as f:
            for s in samples:
                f.write("\t".join(s) + "\n")
        timeline = DiskTimeline(disk_of, status).start() if disk_of else None
        res = subprocess.run(
            [sys.executable, os.path.join(HERE, "reader.py"), "--manifest", manifest,
             "--workers", str(self.args.workers), "--batch-size", str(self.args.batch_size)],
            capture_output=True, text=True)
        disk = timeline.stop() if timeline else None
        if settle is not None and res.returncode == 0:
            settle()
        after = self._snap(serve_pid)
        if res.returncode != 0:
            raise BenchError(f"{system} {pass_name}: reader failed: {res.stderr.strip()}")
        r = json.loads(res.stdout)
        row = self._row(system, pass_name, r, before, after, list_s)
        row["reader_cpu_s"] = r["cpu_s"]
        row["first_file_s"] = r.get("first_file_s")
        row["worker_end_s"] = r.get("worker_end_s")
        if disk is not None:
            row["disk_timeline"] = disk
        self._serving(row, before, after, serve_pid)
        row.update(extra or {})
        return self._add(row, repeat)

    @staticmethod
    def _serving(row, before, after, serve_pid):
        """Adds the serving process's CPU seconds and peak RSS over the pass, if there is one."""
        if serve_pid is not None:
            row["serve_cpu_s"] = _diff(after["serve_cpu"], before["serve_cpu"])
            row["serve_peak_rss_mb"] = after["serve_hwm"]
            row["serve_minor_faults"] = _diff(after["serve_minflt"], before["serve_minflt"])
            t0, t1 = before.get("serve_threads"), after.get("serve_threads")
            if t0 is not None and t1 is not None:
                row["serve_cpu_by_thread"] = {
                    name: round(cpu - t0.get(name, 0.0), 2) for name, cpu in t1.items()
                    if cpu - t0.get(name, 0.0) >= 0.005}

    def _snap(self, serve_pid):
        snap = {"server": self.server.stats(), "server_cpu": self.server.cpu_s(),
                "machine": machine_cpu_ticks()}
        if serve_pid is not None:
            snap["serve_cpu"] = proc_cpu_s(serve_pid)
            snap["serve_hwm"] = proc_hwm_mb(serve_pid)
            snap["serve_minflt"] = proc_minflt(serve_pid)
            snap["serve_threads"] = proc_thread_cpu_s(serve_pid)
        return snap

    def _row(self, system, pass_name, r, before, after, list_s):
        s0, s1 = before["server"], after["server"]
        wall = r["wall_s"]
        return {
            "system": system, "pass": pass_name, "samples": r["samples"], "bytes": r["bytes"],
            "payload_bytes": r["payload_bytes"], "wall_s": wall,
            "samples_per_s": r["samples"] / wall if wall > 0 else None,
            "mb_per_s": r["bytes"] / wall / 1e6 if wall > 0 else None,
            "list_s": list_s,
            "fetched_bytes": s1["body_bytes"] - s0["body_bytes"],
            "requests": {k: s1[k] - s0[k] for k in ("gets", "range_gets", "heads", "lists",
                                                   "other", "connections")},
            "server_cpu_s": _diff(after["server_cpu"], before["server_cpu"]),
            # Every process of the machine, the readers and the S3 server included. Compare
            # with the passes of the same run that are pure CPU work (local warm, JPEG
            # decoding): on the bench's 2-vCPU machine they reach ~1.7, not 2.0.
            "cpus_busy": cpus_in(before.get("machine"), after.get("machine"), 0),
            "cpus_iowait": cpus_in(before.get("machine"), after.get("machine"), 2),
        }

    def _add(self, row, repeat=1):
        exp_samples = self.layout["generated"]["samples"] * repeat
        exp_payload = self.layout["generated"]["image_bytes"] * repeat
        ok = row["samples"] == exp_samples and row["payload_bytes"] == exp_payload
        row["complete"] = ok
        if not ok:
            msg = (f"{row['system']} {row['pass']}: read {row['samples']} samples / "
                   f"{row['payload_bytes']} image bytes, expected {exp_samples} / {exp_payload}")
            row.setdefault("note", msg)
            self.notes.append("CHECK FAILED: " + msg)
        ends = row.get("worker_end_s") or []
        spread = (f"  workers ended {ends[0]:.2f}-{ends[-1]:.2f} s"
                  if len(ends) > 1 else "")
        log(f"{row['system']:>10} {row['pass']:<5} {row['samples_per_s'] or 0:9.0f} samples/s "
            f"{row['mb_per_s'] or 0:8.1f} MB/s  fetched {row['fetched_bytes'] / 1e6:.1f} MB"
            f"{spread}")
        self.rows.append(row)
        return row

    def skipped(self, system, why):
        log(f"{system}: not measured: {why}")
        self.rows.append({"system": system, "pass": "-", "skipped": why})

    # ------------------------------------------------------------ the systems

    def local(self):
        top = os.path.join(self.layout["dir"], "plain")
        self.prepare("cold", None)
        self.read("local", "cold", lambda: sample_list_plain(top, self.args.seed))
        read_tree(top)
        n = self.args.ram_epochs

        def warm_list():
            # The dataset `n` times, each in its own order: as long as the shardfs `ram` pass.
            samples, list_s = [], 0.0
            for k in range(n):
                part, t = sample_list_plain(top, self.args.seed + 100 + k)
                samples += part
                list_s += t
            return samples, list_s
        self.read("local", "warm", warm_list, repeat=n,
                  extra={"note": f"page cache; the dataset {n}x" if n > 1 else "page cache"})

    def fuse_mount(self, system, cmd, mnt, env=None, timeout=60):
        os.makedirs(mnt, exist_ok=True)
        logf = open(os.path.join(self.workdir, f"{system}.log"), "w")
        p = self.procs.start(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env)
        self.procs.mounts.append(mnt)

        def up():
            if p.poll() is not None:
                raise BenchError(f"{system} exited ({p.returncode}) before mounting; "
                                 f"see {logf.name}: {_tail(logf.name)}")
            return os.path.ismount(mnt)

        wait_for(up, timeout, f"the {system} mount at {mnt}")
        return p

    def fuse_done(self, p, mnt):
        self.procs.unmount(mnt)
        self.procs.stop(p)

    def s3_env(self, drop_ca=True):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1")
        if drop_ca:
            env.pop("AWS_CA_BUNDLE", None)
        return env

    def shardfs(self):
        mnt = os.path.join(self.workdir, "mnt-shardfs")
        cache = os.path.join(self.workdir, "cache-shardfs")
        cmd = [self.bins["shardfs"], "mount", f"s3://{BUCKET}/mds", mnt,
               "--endpoint-url", self.server.endpoint, "--cache-dir", cache, "--foreground",
               "--workers", str(self.args.workers), "--batch-size", str(self.args.batch_size),
               "--shuffle", "--epochs", str(2 + self.args.ram_epochs)] + self.args.shardfs_arg
        status = os.path.join(mnt, ".shardfs", "status.json")
        self.prepare("cold", os.path.join(self.layout["dir"], "mds"))
        p = self.fuse_mount("shardfs", cmd, mnt, env=self.s3_env())
        try:
            reset_hwm(p.pid)
            self.read("shardfs", "cold",
                      lambda: sample_list_shardfs(os.path.join(mnt, "rank-0", "epoch-0")),
                      serve_pid=p.pid, disk_of=cache, status=status,
                      extra={"note": "epoch 0, empty cache"})
            self.prepare("warm", os.path.join(self.layout["dir"], "mds"))
            reset_hwm(p.pid)
            self.read("shardfs", "warm",
                      lambda: sample_list_shardfs(os.path.join(mnt, "rank-0", "epoch-1")),
                      serve_pid=p.pid, disk_of=cache, status=status,
                      extra={"note": "epoch 1, shards cached"})
            # Epochs 2.. right after epoch 1, page cache kept: a sample is one inode under
            # every name, so the kernel serves this pass from the pages epoch 1 left
            # (compare with local files read from a warm page cache, as many times).
            n = self.args.ram_epochs

            reset_hwm(p.pid)
            self.read("shardfs", "ram", lambda: ram_epochs_list(mnt, n), serve_pid=p.pid,
                      repeat=n,
                      extra={"note": f"epochs 2-{1 + n} after epoch 1, page cache kept"
                             if n > 1 else "epoch 2 after epoch 1, page cache kept"})
            try:
                with open(os.path.join(mnt, ".shardfs", "status.json")) as f:
                    self.status = json.load(f)
            except (OSError, ValueError):
                pass
            # The names and sizes of the warm and ram passes, for the null-FUSE ceiling below;
            # the inode number as a key, so that a sample is one inode there too.
            null_manifest = os.path.join(self.workdir, "null-fuse-manifest.txt")
            with open(null_manifest, "w") as f:
                for e in range(1, 2 + n):
                    folder = os.path.join(mnt, "rank-0", f"epoch-{e}")
                    for name in sorted(os.listdir(folder)):
                        st = os.stat(os.path.join(folder, name))
                        f.write(f"rank-0/epoch-{e}/{name}\t{st.st_size}\t{st.st_ino}\n")
        finally:
            self.fuse_done(p, mnt)
        # The cache disk's ceiling for the warm pass, on the files it read.
        warm = [r for r in self.rows if r["system"] == "shardfs" and r["pass"] == "warm"]
        if warm and warm[0].get("samples"):
            per_sample = warm[0]["payload_bytes"] // warm[0]["samples"]
            self.disk_ceiling = {"read_bytes": per_sample,
                                 "by_depth": disk_ceiling(cache, per_sample),
                                 "write_mb_per_s": disk_write_ceiling(cache)}
        self.null_fuse(null_manifest)

    def null_fuse(self, manifest):
        """This machine's FUSE ceiling: the warm pass's names and sizes served from memory
        by bench/null_fuse.rs with shardfs's kernel options and FUSE thread count."""
        binary = self.bins.get("null_fuse")
        if not binary or not os.path.exists(binary):
            return self.skipped("null-fuse", "bench-null-fuse not built")
        # shardfs's default: one per CPU core, 2 to 16 (cli/mount_setup.rs default_fuse_threads).
        default_threads = str(min(16, max(2, len(os.sched_getaffinity(0)))))
        threads = shardfs_arg_value(self.args.shardfs_arg, "--fuse-threads", default_threads)
        mnt = os.path.join(self.workdir, "mnt-null")
        p = self.fuse_mount("null-fuse", [binary, "--manifest", manifest, "--threads", threads, mnt],
                            mnt)
        try:
            self.prepare("warm", None)
            self.read("null-fuse", "warm",
                      lambda: sample_list_shardfs(os.path.join(mnt, "rank-0", "epoch-1")),
                      serve_pid=p.pid,
                      extra={"note": "FUSE ceiling: same names/sizes from memory"})
            # shardfs's ram pass on the same tree: the kernel's page cache through FUSE.
            n = self.args.ram_epochs

            self.read("null-fuse", "ram", lambda: ram_epochs_list(mnt, n), serve_pid=p.pid,
                      repeat=n,
                      extra={"note": "page-cache ceiling through FUSE: the ram pass's names, "
                                     "one inode per sample, after the warm pass"})
        finally:
            self.fuse_done(p, mnt)

    def streaming(self):
        py = os.path.join(self.args.venv, "bin", "python")
        if not os.path.exists(py):
            return self.skipped("streaming", f"no venv at {self.args.venv} (run.sh --setup-venv)")
        local = os.path.join(self.workdir, "cache-streaming")
        env = self.s3_env()
        env["S3_ENDPOINT_URL"] = self.server.endpoint
        for pass_name in ("cold", "warm"):
            self.prepare(pass_name, os.path.join(self.layout["dir"], "mds"))
            before = self._snap(None)
            res = subprocess.run(
                [py, os.path.join(HERE, "sd_reader.py"), "--remote", f"s3://{BUCKET}/mds",
                 "--local", local, "--workers", str(self.args.workers), "--batch-size",
                 str(self.args.batch_size)], capture_output=True, text=True, env=env)
            after = self._snap(None)
            if res.returncode != 0:
                raise BenchError(f"StreamingDataset {pass_name} failed: {_last(res.stderr)}")
            r = json.loads(res.stdout.strip().splitlines()[-1])
            row = self._row("streaming", pass_name, r, before, after, None)
            # Its first batch (of --batch-size samples), not file.
            row["first_file_s"] = r.get("first_batch_s")
            row.update({"serve_cpu_s": r["cpu_s"], "serve_peak_rss_mb": r["peak_rss_mb"],
                        "note": ("empty cache" if pass_name == "cold" else "shards local")
                        + f"; CPU/RSS of the whole DataLoader (import {r['import_s']:.1f}s "
                        "not timed)"})
            self._add(row)

    def egress(self):
        """Bytes fetched per epoch over two epochs with the cache limited to 25 % and 100 % of
        the dataset: shardfs (`--cache-limit`) and StreamingDataset (`cache_limit`)."""
        total = sum(self.layout["sizes"][k] for k in self.layout["mds_keys"] if k.endswith(".mds"))
        py = os.path.join(self.args.venv, "bin", "python")
        # Shuffle blocks spanning half of the smallest cache: with the default block (4M
        # samples, more than this dataset) every sample comes from any shard at random, and a
        # cache of a quarter of the shards misses ~3 reads in 4 in any system (measured here:
        # 0.69 shard downloads per sample read). Both systems get the same block size.
        block = max(1, int(self.layout["generated"]["samples"] * min(EGRESS_LIMITS) / 2))
        for frac in EGRESS_LIMITS:
            limit = int(total * frac) + (0 if frac < 1 else 1 << 20)
            tag = f"{frac:.0%} cache"
            mnt = os.path.join(self.workdir, f"mnt-egress-{int(frac * 100)}")
            cache = os.path.join(self.workdir, f"cache-egress-{int(frac * 100)}")
            cmd = [self.bins["shardfs"], "mount", f"s3://{BUCKET}/mds", mnt,
                   "--endpoint-url", self.server.endpoint, "--cache-dir", cache, "--foreground",
                   "--workers", str(self.args.workers), "--batch-size",
                   str(self.args.batch_size), "--shuffle", "--epochs", "2",
                   "--cache-limit", str(limit), "--shuffle-block-size", str(block)]
            cmd += self.args.shardfs_arg
            p = self.fuse_mount("shardfs", cmd, mnt, env=self.s3_env())
            try:
                for epoch in (0, 1):
                    # A dataset that fits in RAM would give epoch 1 from the page cache
                    # (measured by the `ram` pass); this compares what the disk cache fetches.
                    self.prepare(f"epoch {epoch}", None)
                    folder = os.path.join(mnt, "rank-0", f"epoch-{epoch}")
                    ahead0 = fetched_ahead(mnt)
                    # The counters are read once no readahead fetch is in flight: the mount
                    # counts a fetch for the next epoch when it ends, the server its bytes as
                    # they go, so a fetch still running would be split between the two
                    # epochs' columns.
                    row = self.read(f"shardfs {tag}", f"epoch {epoch}",
                                    lambda folder=folder: sample_list_shardfs(folder),
                                    serve_pid=p.pid,
                                    settle=lambda: readahead_settled(mnt),
                                    extra={"note": f"--cache-limit {limit} "
                                                   f"--shuffle-block-size {block}"})
                    # Shards the readahead fetched during this epoch for the next one's
                    # first reads (counted by the mount).
                    row["fetched_for_next_epoch"] = fetched_ahead(mnt) - ahead0
            finally:
                self.fuse_done(p, mnt)
            shutil.rmtree(cache, ignore_errors=True)
            if not os.path.exists(py):
                self.skipped(f"streaming {tag}", f"no venv at {self.args.venv}")
                continue
            env = self.s3_env()
            env["S3_ENDPOINT_URL"] = self.server.endpoint
            local = os.path.join(self.workdir, f"cache-streaming-egress-{int(frac * 100)}")
            res = subprocess.run(
                [py, os.path.join(HERE, "sd_reader.py"), "--remote", f"s3://{BUCKET}/mds",
                 "--local", local, "--workers", str(self.args.workers), "--batch-size",
                 str(self.args.batch_size), "--epochs", "2", "--cache-limit", str(limit),
                 "--stats-url", f"{self.server.endpoint}/__bench/stats",
                 "--shuffle-block-size", str(block)],
                capture_output=True, text=True, env=env)
            shutil.rmtree(local, ignore_errors=True)
            if res.returncode != 0:
                self.skipped(f"streaming {tag}", f"FAILED: {_last(res.stderr)}")
                continue
            for line in res.stdout.strip().splitlines():
                r = json.loads(line)
                row = {"system": f"streaming {tag}", "pass": f"epoch {r['epoch']}",
                       "samples": r["samples"], "bytes": r["bytes"],
                       "payload_bytes": r["payload_bytes"], "wall_s": r["wall_s"],
                       "samples_per_s": r["samples"] / r["wall_s"] if r["wall_s"] else None,
                       "mb_per_s": r["bytes"] / r["wall_s"] / 1e6 if r["wall_s"] else None,
                       "list_s": None, "fetched_bytes": r["fetched_bytes"],
                       "requests": {k: 0 for k in ("gets", "range_gets", "heads", "lists",
                                                   "other", "connections")},
                       "note": f"cache_limit {limit}, shuffle_block_size {block}; "
                               "requests not counted per epoch"}
                self._add(row)

    def jpeg(self):
        """Loading that decodes real JPEGs (Pillow, in a torch DataLoader): local files with the
        page cache dropped and warm (the decode ceiling), shardfs and StreamingDataset from an
        empty cache over the emulated link. Shows whether loading or decoding is the limit."""
        py = os.path.join(self.args.venv, "bin", "python")
        if not os.path.exists(py):
            return self.skipped("jpeg", f"no venv at {self.args.venv}")
        data = self.layout.get("jpeg")
        if data is None:
            return self.skipped("jpeg", "the JPEG dataset was not generated")
        n = data["generated"]["samples"]
        reader = [py, os.path.join(HERE, "jpeg_reader.py"), "--workers", str(self.args.workers),
                  "--batch-size", str(self.args.batch_size)]

        def run(system, pass_name, extra_args, serve_pid=None, note=""):
            before = self._snap(serve_pid)
            res = subprocess.run(reader + extra_args, capture_output=True, text=True,
                                 env=dict(self.s3_env(), S3_ENDPOINT_URL=self.server.endpoint))
            after = self._snap(serve_pid)
            if res.returncode != 0:
                raise BenchError(f"{system} {pass_name}: jpeg reader failed: {_last(res.stderr)}")
            r = json.loads(res.stdout)
            r["bytes"] = r["payload_bytes"] = r["jpeg_bytes"]
            row = self._row(system, pass_name, r, before, after, None)
            row.update(reader_cpu_s=r["cpu_s"], note=note, complete=r["samples"] == n)
            self._serving(row, before, after, serve_pid)
            if not row["complete"]:
                self.notes.append(f"CHECK FAILED: {system}: {r['samples']} of {n} samples")
            log(f"{system:>15} {pass_name:<5} {row['samples_per_s'] or 0:9.0f} samples/s")
            self.rows.append(row)

        plain = os.path.join(data["dir"], "plain")
        manifest = os.path.join(self.workdir, "jpeg-local.txt")
        files = sorted(os.path.join(r, n) for r, _, names in os.walk(plain) for n in names
                       if n.endswith(".jpg"))
        random.Random(self.args.seed).shuffle(files)
        with open(manifest, "w") as f:
            for path in files:
                f.write(f"{path}\t{int(os.path.basename(os.path.dirname(path))[6:])}\n")
        self.prepare("cold", None)
        run("jpeg local", "cold", ["--manifest", manifest], note="page cache dropped")
        run("jpeg local", "warm", ["--manifest", manifest], note="page cache: decode ceiling")
        mnt = os.path.join(self.workdir, "mnt-jpeg")
        cache = os.path.join(self.workdir, "cache-jpeg")
        cmd = [self.bins["shardfs"], "mount", f"s3://{BUCKET}/jpeg/mds", mnt,
               "--endpoint-url", self.server.endpoint, "--cache-dir", cache, "--foreground",
               "--workers", str(self.args.workers), "--batch-size", str(self.args.batch_size),
               "--shuffle"] + self.args.shardfs_arg
        self.prepare("cold", os.path.join(data["dir"], "mds"))
        p = self.fuse_mount("shardfs", cmd, mnt, env=self.s3_env())
        try:
            reset_hwm(p.pid)
            folder = os.path.join(mnt, "rank-0", "epoch-0")
            manifest = os.path.join(self.workdir, "jpeg-shardfs.txt")
            with open(manifest, "w") as f:
                for paths in sample_list_shardfs(folder)[0]:
                    jpg = next(x for x in paths if x.endswith(".jpg"))
                    label = next(x for x in paths if ".label." in x)
                    f.write(f"{jpg}\t{label}\n")
            run("jpeg shardfs", "cold", ["--manifest", manifest], serve_pid=p.pid,
                note="epoch 0, empty cache")
        finally:
            self.fuse_done(p, mnt)
        local = os.path.join(self.workdir, "cache-jpeg-streaming")
        self.prepare("cold", os.path.join(data["dir"], "mds"))
        run("jpeg streaming", "cold",
            ["--remote", f"s3://{BUCKET}/jpeg/mds", "--local", local], note="empty cache")
        shutil.rmtree(local, ignore_errors=True)

    def s3fs(self):
        if not shutil.which("s3fs"):
            return self.skipped("s3fs", "s3fs not installed (apt-get install s3fs)")
        mnt = os.path.join(self.workdir, "mnt-s3fs")
        cache = os.path.join(self.workdir, "cache-s3fs")
        os.makedirs(cache, exist_ok=True)
        pw = os.path.join(self.workdir, "s3fs.passwd")
        with open(pw, "w") as f:
            f.write(f"{ACCESS_KEY}:{SECRET_KEY}\n")
        os.chmod(pw, 0o600)
        cmd = ["s3fs", f"{BUCKET}:/plain", mnt, "-f", "-o", f"url={self.server.endpoint}",
               "-o", "use_path_request_style", "-o", f"passwd_file={pw}", "-o",
               f"use_cache={cache}", "-o", "ro", "-o", "endpoint=us-east-1"]
        self.per_object_mount("s3fs", cmd, mnt, "use_cache on local disk")

    def rclone(self):
        if not shutil.which("rclone"):
            return self.skipped("rclone", "rclone not installed (apt-get install rclone)")
        mnt = os.path.join(self.workdir, "mnt-rclone")
        cache = os.path.join(self.workdir, "cache-rclone")
        cmd = ["rclone", "mount", f":s3:{BUCKET}/plain", mnt, "--s3-provider", "Other",
               "--s3-endpoint", self.server.endpoint, "--s3-env-auth", "--s3-region",
               "us-east-1", "--vfs-cache-mode", "full", "--cache-dir", cache, "--read-only",
               "--config", os.path.join(self.workdir, "rclone.conf")]
        self.per_object_mount("rclone", cmd, mnt, "--vfs-cache-mode full")

    def mountpoint(self):
        """Mountpoint for S3: its CLI when installed, else the example bench/build_mountpoint.sh builds."""
        bin_dir = os.path.expanduser("~/.cache/shardfs-bench/bin")
        cli = shutil.which("mount-s3") or os.path.join(bin_dir, "mount-s3")
        example = os.path.join(bin_dir, "mountpoint-from-config")
        mnt = os.path.join(self.workdir, "mnt-mountpoint")
        cache = os.path.join(self.workdir, "cache-mountpoint")
        os.makedirs(cache, exist_ok=True)
        if os.path.exists(cli):
            cmd = [cli, BUCKET, mnt, "--prefix", "plain/", "--endpoint-url",
                   self.server.endpoint, "--force-path-style", "--region", "us-east-1",
                   "--read-only", "--cache", cache, "-f"]
            return self.per_object_mount("mountpoint", cmd, mnt, "--cache on local disk")
        if not os.path.exists(example):
            return self.skipped("mountpoint", "not built: run bench/build_mountpoint.sh "
                                "(~35 min, once)")
        import mountpoint_manifest
        plain = os.path.join(self.layout["dir"], "plain")
        config = os.path.join(self.workdir, "mountpoint.json")
        mountpoint_manifest.write_config(
            config, mountpoint=mnt, bucket=BUCKET, prefix="plain/", top=plain,
            endpoint=self.server.endpoint, workdir=self.workdir, cache_dir=cache,
            cache_limit_bytes=2 * sum(self.layout["sizes"][k] for k in self.layout["plain_keys"]),
            directory_name="plain")
        env = dict(self.s3_env(), AWS_EC2_METADATA_DISABLED="true")
        self.per_object_mount("mountpoint", [example, "--config", config], mnt,
                              "mountpoint-s3-fs 0.11.0 mount_from_config, disk cache", env=env)

    def per_object_mount(self, system, cmd, mnt, how, env=None):
        plain = os.path.join(self.layout["dir"], "plain")
        self.prepare("cold", plain)
        p = self.fuse_mount(system, cmd, mnt, env=env or self.s3_env())
        try:
            reset_hwm(p.pid)
            self.read(system, "cold", lambda: sample_list_plain(mnt, self.args.seed),
                      serve_pid=p.pid,
                      extra={"note": f"{how}, empty"})
            self.prepare("warm", plain)
            reset_hwm(p.pid)
            self.read(system, "warm", lambda: sample_list_plain(mnt, self.args.seed + 1),
                      serve_pid=p.pid,
                      extra={"note": f"{how}, filled; new shuffle"})
        finally:
            self.fuse_done(p, mnt)


def keep_logs(workdir, out_dir):
    """Copies the run's logs (mounts, servers) to OUT/logs/ for a failure report."""
    dest = os.path.join(out_dir, "logs")
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(workdir):
        if name.endswith((".log", ".err", ".out")):
            shutil.copyfile(os.path.join(workdir, name), os.path.join(dest, name))
    log(f"logs copied to {dest}")


def _diff(a, b):
    return None if a is None or b is None else a - b


def _tail(path, n=3):
    try:
        with open(path) as f:
            return " | ".join(line.strip() for line in f.readlines()[-n:])
    except OSError:
        return ""


def _last(text, n=4):
    return " | ".join(text.strip().splitlines()[-n:])


# ---------------------------------------------------------------- micro-benchmarks

def micro(args, bins):
    """Runs the module micro-benchmarks that exist (plan generation, cache, sample lookup)."""
    results = {}
    for name, cmd in bins.get("micro", {}).items():
        log(f"micro: {name}: {' '.join(cmd)}")
        res = subprocess.run(cmd, capture_output=True, text=True)
        results[name] = {"cmd": cmd, "rc": res.returncode, "stdout": res.stdout[-20000:],
                         "stderr": _last(res.stderr, 10)}
        print(f"\n## micro: {name} (exit {res.returncode})\n{res.stdout.rstrip()}", flush=True)
        if res.returncode != 0:
            log(f"micro-benchmark {name} failed: {_last(res.stderr)}")
    return results


# ---------------------------------------------------------------- report

def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(rows):
    base = {}
    for r in rows:
        if r.get("skipped") is None and r["system"] in ("local", "streaming"):
            base[(r["system"], r["pass"])] = r["samples_per_s"]
    head = ("| system | pass | samples/s | MB/s | × local | × SD | serving CPU s | CPUs busy "
            "| peak RSS MB | fetched MB | GET / HEAD / LIST | list s | first file s | note |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['system']} | - | not measured | | | | | | | | | | | {r['skipped']} |")
            continue
        # A pass from the page cache ("ram") compares with local files read warm.
        a = base.get(("local", "warm" if r["pass"] == "ram" else r["pass"]))
        c = base.get(("streaming", r["pass"]))
        sps = r["samples_per_s"]
        q = r["requests"]
        lines.append(
            f"| {r['system']} | {r['pass']} | {fmt(sps, '.0f')} | {fmt(r['mb_per_s'], '.1f')} "
            f"| {fmt(sps / a if a and sps else None, '.2f')} "
            f"| {fmt(sps / c if c and sps else None, '.2f')} "
            f"| {fmt(r.get('serve_cpu_s'), '.1f')} | {fmt(r.get('cpus_busy'), '.2f')} "
            f"| {fmt(r.get('serve_peak_rss_mb'), '.0f')} "
            f"| {r['fetched_bytes'] / 1e6:.0f} | {q['gets']} / {q['heads']} / {q['lists']} "
            f"| {fmt(r.get('list_s'), '.2f')} | {fmt(r.get('first_file_s'), '.3f')} "
            f"| {r.get('note', '')}"
            + ("" if r.get("complete", True) else " **INCOMPLETE**") + " |")
    return "\n".join(lines)


def ram_epochs_list(mnt, n):
    """The samples of `rank-0/epoch-2` .. `epoch-{1 + n}` of a mount (the ram pass), and the
    seconds their listing took."""
    samples, list_s = [], 0.0
    for e in range(2, 2 + n):
        part, t = sample_list_shardfs(os.path.join(mnt, "rank-0", f"epoch-{e}"))
        samples += part
        list_s += t
    return samples, list_s


def readahead_settled(mnt, timeout=60):
    """Waits until the mount's readahead has no fetch in flight (status.json), twice in a row
    0.2 s apart (a finished fetch may start the next one at once)."""
    quiet, deadline = 0, time.time() + timeout
    while quiet < 2:
        if time.time() > deadline:
            raise BenchError(f"the readahead of {mnt} never settled in {timeout} s")
        with open(os.path.join(mnt, ".shardfs", "status.json")) as f:
            busy = json.load(f)["readahead"].get("fetches_in_flight", 0)
        quiet = 0 if busy else quiet + 1
        time.sleep(0.2)


def fetched_ahead(mnt):
    """Bytes the mount's readahead has fetched for a rank's next epoch (status.json)."""
    with open(os.path.join(mnt, ".shardfs", "status.json")) as f:
        return json.load(f)["readahead"].get("prefetched_bytes_for_next_epoch", 0)


def egress_table(rows):
    """Bytes fetched per epoch by shardfs and StreamingDataset at the same cache limit."""
    by = {(r["system"], r["pass"]): r for r in rows if not r.get("skipped")}
    lines = ["| cache limit | epoch | shardfs MB fetched | of it for the next epoch "
             "| shardfs MB for this epoch's reads | StreamingDataset MB fetched "
             "| shardfs / SD (fetched) | shardfs / SD (by epoch read) |",
             "|---|---|---|---|---|---|---|---|"]
    for frac in EGRESS_LIMITS:
        tag = f"{frac:.0%} cache"
        sums = [0, 0]
        ahead_before = 0
        for epoch in (0, 1, "both"):
            if epoch == "both":
                fa, fb = sums
                ahead = 0
                if not fa:
                    continue
            else:
                a = by.get((f"shardfs {tag}", f"epoch {epoch}"))
                b = by.get((f"streaming {tag}", f"epoch {epoch}"))
                if not a:
                    continue
                fa = a["fetched_bytes"]
                fb = b["fetched_bytes"] if b else None
                ahead = a.get("fetched_for_next_epoch") or 0
                sums[0] += fa
                sums[1] = None if fb is None or sums[1] is None else sums[1] + fb
            # By the epoch whose reads need the bytes: what the previous epoch fetched ahead
            # for this one counts here, what this one fetched for the next one does not (the
            # last epoch's fetches for an epoch never read stay in the total).
            mine = fa - ahead + ahead_before if epoch != "both" else fa
            ahead_before = ahead
            lines.append(f"| {tag.split()[0]} | {epoch} | {fa / 1e6:.0f} "
                         f"| {ahead / 1e6:.0f} | {mine / 1e6:.0f} "
                         f"| {fmt(fb / 1e6 if fb is not None else None, '.0f')} "
                         f"| {fmt(fa / fb if fb else None, '.2f')} "
                         f"| {fmt(mine / fb if fb else None, '.2f')} |")
    return "\n".join(lines)


def jpeg_table(rows):
    """The JPEG-decoding pass against decoding from the page cache (the ceiling)."""
    by = {(r["system"], r["pass"]): r for r in rows if not r.get("skipped")}
    ceiling = by.get(("jpeg local", "warm"), {}).get("samples_per_s")
    lines = ["| loader (decode in a DataLoader) | pass | samples/s | × decode ceiling "
             "| reader CPU s | serving CPU s | note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("skipped") or not r["system"].startswith("jpeg "):
            continue
        sps = r["samples_per_s"]
        lines.append(f"| {r['system'][5:]} | {r['pass']} | {fmt(sps, '.0f')} "
                     f"| {fmt(sps / ceiling if ceiling and sps else None, '.2f')} "
                     f"| {fmt(r.get('reader_cpu_s'), '.1f')} | {fmt(r.get('serve_cpu_s'), '.1f')} "
                     f"| {r.get('note', '')}" + ("" if r.get("complete", True)
                                                  else " **INCOMPLETE**") + " |")
    return "\n".join(lines)


def server_table(curl):
    lines = ["| server | measurement | MB/s | objects/s | seconds |", "|---|---|---|---|---|"]
    for label, rows in curl.items():
        for name, r in rows.items():
            lines.append(f"| {label} | {name} | {r['mb_per_s']:.0f} | {r['objects_per_s']:.0f} "
                         f"| {r['wall_s']:.3f} |")
    return "\n".join(lines)


def cache_shard_files(folder):
    """[(path, size)] of the shard files a shardfs cache folder holds, whatever they are
    named: every regular file under the `shards/` folder of each dataset folder (the one
    beside its `dataset.json`, src/cache/layout.rs), in subfolders too (basenames may hold
    folders). Fills in progress (`tmp/`) and checksums (`sums/`) are not shard files."""
    out = []
    for root, dirs, _ in os.walk(folder):
        if "dataset.json" not in os.listdir(root) or "shards" not in dirs:
            continue
        for sroot, _, names in os.walk(os.path.join(root, "shards")):
            for n in names:
                path = os.path.join(sroot, n)
                if os.path.isfile(path) and not os.path.islink(path):
                    out.append((path, os.path.getsize(path)))
        dirs.clear()
    return sorted(out)


def disk_ceiling(folder, read_bytes, depths=(1, 4, 8), reads=4000):
    """This machine's cache-disk ceiling for a warm pass: random reads of one sample's size
    (rounded up to 4 KiB, at 4 KiB-aligned offsets) of the shard files of the shardfs cache
    folder `folder` (`cache_shard_files`) with
    O_DIRECT (what shardfs does with its cache files), from `depth` threads at once.
    {depth: {reads_per_s, mb_per_s}}, or {} when the files or O_DIRECT are not there.
    Python threads (preadv releases the GIL); the reads are ~100 µs, the Python around
    them a few."""
    import mmap
    import threading
    files = [(p, size) for p, size in cache_shard_files(folder) if size > 2 * read_bytes]
    if not files:
        return {}
    span = (read_bytes + 4095) // 4096 * 4096
    try:
        fds = [(os.open(p, os.O_RDONLY | os.O_DIRECT), size) for p, size in files]
    except OSError:
        return {}
    out = {}
    try:
        for depth in depths:
            rng = random.Random(depth)
            plan = [(fd, rng.randrange(0, (size - span) // 4096) * 4096)
                    for fd, size in (rng.choice(fds) for _ in range(reads))]
            failed = []

            def worker(part):
                buf = mmap.mmap(-1, span)
                try:
                    for fd, off in part:
                        os.preadv(fd, [buf], off)
                except OSError as e:
                    failed.append(e)
            wall = run_threads([threading.Thread(target=worker, args=(plan[k::depth],))
                                for k in range(depth)])
            if failed:
                return {}
            out[depth] = {"reads_per_s": reads / wall, "mb_per_s": reads * span / wall / 1e6}
    finally:
        for fd, _ in fds:
            os.close(fd)
    return out


def run_threads(threads):
    """Starts `threads` together and waits for them all; returns the seconds that took."""
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t


class DiskTimeline:
    """What the disk under a folder did during a pass, sampled every 0.1 s from /proc/diskstats
    and /proc/stat: bytes read and written, the best second of each, and the time it had I/O
    in flight but completed none (a stall: a throttled or flushing virtual disk), with what
    the CPUs did meanwhile. Shows which physical limit a pass met."""

    STEP = 0.1

    def __init__(self, folder, status=None):
        self.device = block_device_of(folder)
        self.status = status
        self.samples = []
        self._stop = None
        self._thread = None

    def _read(self):
        try:
            with open("/proc/diskstats") as f:
                for line in f:
                    v = line.split()
                    if len(v) > 11 and v[2] == self.device:
                        # sectors read, sectors written, I/Os in flight, and (kernels since
                        # 4.18 and 5.5) sectors discarded, flushes done, ms spent flushing
                        extra = tuple(int(v[k]) if len(v) > k else 0 for k in (16, 18, 19))
                        return (int(v[5]), int(v[9]), int(v[11])) + extra
        except (OSError, ValueError):
            pass
        return None

    def start(self):
        import threading
        if self.device is None:
            return self
        self._stop = threading.Event()

        def run():
            while True:
                d, c = self._read(), machine_cpu_ticks()
                if d is not None and c is not None:
                    self.samples.append((time.monotonic(), d, c, self._fetched()))
                if self._stop.wait(self.STEP):
                    break
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """The summary (None without a block device or samples)."""
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        d = self._read()
        c = machine_cpu_ticks()
        if d is not None and c is not None:
            self.samples.append((time.monotonic(), d, c, self._fetched()))
        return disk_timeline_summary(self.samples, self.device)

    def _fetched(self):
        """(bytes fetched, FUSE reads of every rank) from the mount's status.json, or None."""
        if not self.status:
            return None
        try:
            with open(self.status) as f:
                st = json.load(f)
            fetched = sum(c.get("bytes_fetched", 0) for c in st.get("cache", []))
            reads = sum(r.get("requests", 0) for r in st.get("readahead", {}).get("ranks", []))
            return fetched, reads
        except (OSError, ValueError, AttributeError, TypeError):
            return None


def fresh_memory():
    """How fast this machine writes memory it has not touched before, against the same memory
    written again: GB/s of 1 MiB writes over 512 MiB of a new anonymous mapping, twice. On a
    virtual machine whose free memory goes back to its host (free page reporting, a balloon),
    the first write of every page faults on the host too: the page cache a pass fills after
    the caches were dropped costs that (FUSE copies each byte into new pages), and it varies
    with what the host did with the memory meanwhile. Also says whether the kernel reports
    free pages to a host (`page_reporting`: the order of the blocks it reports, else None)."""
    import mmap
    size, piece = 512 << 20, 1 << 20
    block = b"\x5a" * piece
    rates = []
    m = mmap.mmap(-1, size)
    try:
        for _ in range(2):
            t = time.perf_counter()
            for off in range(0, size, piece):
                m[off:off + piece] = block
            rates.append(size / (time.perf_counter() - t) / 1e9)
    finally:
        m.close()
    order = None
    try:
        with open("/sys/module/page_reporting/parameters/page_reporting_order") as f:
            order = int(f.read().strip())
    except (OSError, ValueError):
        pass
    return {"first_write_gb_per_s": rates[0], "again_gb_per_s": rates[1],
            "page_reporting_order": order}


def block_device_of(folder):
    """The name /proc/diskstats gives the block device holding `folder` (vda, nvme0n1p1, ...);
    None when it is on no block device (tmpfs, overlay of one) or cannot be told."""
    try:
        st = os.stat(folder)
        with open(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/uevent") as f:
            for line in f:
                if line.startswith("DEVNAME="):
                    return line.strip().split("=", 1)[1]
    except OSError:
        pass
    return None


def disk_timeline_summary(samples, device):
    """DiskTimeline's samples [(t, (sectors read, sectors written, in flight, sectors
    discarded, flushes, ms flushing), cpu ticks,
    (bytes fetched, reads) or None)] summed up; None with fewer than two."""
    if len(samples) < 2:
        return None
    sector = 512
    t0, d0 = samples[0][0], samples[0][1]
    t1, d1 = samples[-1][0], samples[-1][1]
    stalled = 0.0
    stall_cpu = [0, 0, 0]
    for (ta, da, ca, _), (tb, db, cb, _) in zip(samples, samples[1:]):
        if db[0] == da[0] and db[1] == da[1] and da[2] > 0 and db[2] > 0:
            stalled += tb - ta
            for k in range(3):
                stall_cpu[k] += cb[k] - ca[k]

    def best_second(field):
        """MB/s of sectors `field` over the busiest window of 0.5-1 s; None in a shorter
        pass."""
        best, j = None, 0
        for i in range(len(samples)):
            while samples[i][0] - samples[j][0] > 1.0:
                j += 1
            dt = samples[i][0] - samples[j][0]
            if dt >= 0.5:
                moved = samples[i][1][field] - samples[j][1][field]
                best = max(best or 0.0, moved * sector / dt / 1e6)
        return best

    cpus = os.cpu_count() or 1

    def share(k):
        """CPUs in field `k` of machine_cpu_ticks() on average while the disk stalled."""
        return stall_cpu[k] / stall_cpu[1] * cpus if stall_cpu[1] > 0 else None

    # When the pass's last download landed (the first sample with every byte it fetched), and
    # how many reads the readers had made by then: on a dataset of one shuffle block they
    # wait for nearly every shard, so a cold pass is downloads, then serving.
    fetches = [(t, f) for t, _, _, f in samples if f is not None]
    downloads = None
    if len(fetches) >= 2 and fetches[-1][1][0] > fetches[0][1][0]:
        t_end, f_end = next((t, f) for t, f in fetches if f[0] == fetches[-1][1][0])
        downloads = {"last_landed_s": t_end - t0, "reads_by_then": f_end[1] - fetches[0][1][1],
                     "reads_after": fetches[-1][1][1] - f_end[1]}
    return {"device": device, "seconds": t1 - t0, "downloads": downloads,
            "read_mb": (d1[0] - d0[0]) * sector / 1e6,
            "written_mb": (d1[1] - d0[1]) * sector / 1e6,
            "discarded_mb": (d1[3] - d0[3]) * sector / 1e6,
            "flushes": d1[4] - d0[4], "flush_s": (d1[5] - d0[5]) / 1e3,
            "best_second_read_mb_per_s": best_second(0),
            "best_second_write_mb_per_s": best_second(1),
            "stalled_s": stalled,
            "stall_cpus_busy": share(0), "stall_cpus_iowait": share(2)}


def disk_timeline_table(rows):
    """The cache disk during each shardfs pass that has a timeline; "" when none has."""
    have = [r for r in rows if r.get("system") == "shardfs" and r.get("disk_timeline")]
    if not have:
        return ""
    lines = ["| shardfs pass | seconds | last download landed at s (FUSE reads by then / after) "
             "| disk read MB | disk wrote MB | best second read MB/s "
             "| best second write MB/s | stalled s (I/O in flight, none done) "
             "| CPUs busy / in iowait while stalled | discarded MB | flushes (s in them) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in have:
        d = r["disk_timeline"]
        dl = d.get("downloads")
        landed = (f"{dl['last_landed_s']:.1f} ({dl['reads_by_then']} / {dl['reads_after']})"
                  if dl else "-")
        lines.append(
            f"| {r['pass']} | {d['seconds']:.1f} | {landed} "
            f"| {d['read_mb']:.0f} | {d['written_mb']:.0f} "
            f"| {fmt(d['best_second_read_mb_per_s'], '.0f')} "
            f"| {fmt(d['best_second_write_mb_per_s'], '.0f')} "
            f"| {d['stalled_s']:.1f} | {fmt(d['stall_cpus_busy'], '.2f')} / "
            f"{fmt(d['stall_cpus_iowait'], '.2f')} "
            f"| {d['discarded_mb']:.0f} | {d['flushes']} ({d['flush_s']:.1f}) |")
    return "\n".join(lines)


def disk_write_ceiling(folder, files=2, piece=8 << 20, per_file=256 << 20):
    """The cache disk's write ceiling for a cold pass, which writes every shard it fetches
    to the cache: MB/s of sequential O_DIRECT writes of `piece`-byte pieces (as shardfs
    stages a download's parts) to `files` new files at once in `folder`'s file system (as
    two or more shards are written at once), fsynced at the end; None when O_DIRECT or the
    folder is not there. The files are removed after."""
    import mmap
    import threading
    if not os.path.isdir(folder):
        return None
    paths = [os.path.join(folder, f".bench-write-ceiling-{k}") for k in range(files)]
    failed = []

    def worker(path):
        buf = mmap.mmap(-1, piece)
        buf.write(os.urandom(4096) * (piece // 4096))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
        except OSError as e:
            failed.append(e)
            return
        try:
            for k in range(per_file // piece):
                os.pwritev(fd, [buf], k * piece)
            os.fsync(fd)
        except OSError as e:
            failed.append(e)
        finally:
            os.close(fd)
    wall = run_threads([threading.Thread(target=worker, args=(p,)) for p in paths])
    for p in paths:
        try:
            os.remove(p)
        except OSError:
            pass
    if failed:
        return None
    return files * per_file / wall / 1e6


def disk_table(ceiling, read_bytes, write_mb_per_s=None):
    lines = [f"| cache disk: random O_DIRECT reads of {read_bytes / 1e3:.0f} KB "
             "(one sample) | reads/s | MB/s |", "|---|---|---|"]
    for depth, r in sorted(ceiling.items()):
        lines.append(f"| {depth} at once | {r['reads_per_s']:.0f} | {r['mb_per_s']:.0f} |")
    if write_mb_per_s:
        lines.append(f"| (sequential O_DIRECT writes of 8 MiB, 2 files at once: what a cold "
                     f"pass's cache fills need) | - | {write_mb_per_s:.0f} |")
    return "\n".join(lines)


def cold_epoch_targets(rows, curl, conns, ceiling):
    """Issue 36's targets, each as the measured value and its ratio to the baseline of the
    same run: [(target, value, baseline, ratio, goal, met)]. Missing rows give no line."""
    by = {(r["system"], r["pass"]): r for r in rows if not r.get("skipped")}
    cold, warm = by.get(("shardfs", "cold")), by.get(("shardfs", "warm"))
    link = curl.get("emulated link", {})
    out = []

    def add(target, value, baseline, goal, want_high=True):
        if value is None or not baseline:
            return
        ratio = value / baseline
        out.append({"target": target, "value": value, "baseline": baseline, "ratio": ratio,
                    "goal": goal, "goal_text": f"≥ {goal}×",
                    "met": ratio >= goal if want_high else ratio <= goal})

    if cold:
        wire = link.get(f"shards_{conns}_streams") or link.get("shards_16_streams")
        add(f"cold MB/s vs the link (curl, {conns} connections)", cold["mb_per_s"],
            wire and wire["mb_per_s"], 0.35)
        sd = by.get(("streaming", "cold"))
        add("cold samples/s vs StreamingDataset cold", cold["samples_per_s"],
            sd and sd["samples_per_s"], 3.0)
        local = by.get(("local", "cold"))
        add("cold samples/s vs local files cold", cold["samples_per_s"],
            local and local["samples_per_s"], 0.6)
        gb = cold["fetched_bytes"] / 1e9
        if cold.get("serve_cpu_s") is not None and gb > 0:
            out.append({"target": "daemon CPU-s per cold GB", "value": cold["serve_cpu_s"] / gb,
                        "baseline": None, "ratio": None, "goal": 1.5, "goal_text": "≤ 1.5",
                        "met": cold["serve_cpu_s"] / gb <= 1.5})
        part = link.get("part_1_request")
        if cold.get("first_file_s") is not None:
            out.append({"target": "first file s of the cold epoch",
                        "value": cold["first_file_s"], "baseline": part and part["wall_s"],
                        "ratio": part and cold["first_file_s"] / part["wall_s"], "goal": 0.3,
                        "goal_text": "≤ 0.3 s", "met": cold["first_file_s"] <= 0.3})
    if warm:
        fuse = by.get(("null-fuse", "warm"))
        disk = max((d["reads_per_s"] for d in (ceiling or {}).values()), default=None)
        lower = min(x for x in (disk, fuse and fuse["samples_per_s"]) if x) \
            if disk or fuse else None
        add("warm samples/s vs min(disk ceiling, null-FUSE warm)", warm["samples_per_s"],
            lower, 0.8)
        local = by.get(("local", "cold"))
        add("warm samples/s vs local files cold", warm["samples_per_s"],
            local and local["samples_per_s"], 1.0)
    rss = [r.get("serve_peak_rss_mb") for (s, _), r in by.items() if s == "shardfs"]
    rss = [x for x in rss if x is not None]
    if rss:
        out.append({"target": "peak RSS MB, every shardfs pass", "value": max(rss),
                    "baseline": None, "ratio": None, "goal": 320, "goal_text": "≤ 320",
                    "met": max(rss) <= 320})
    return out


def daemon_threads_table(rows, write_mb_per_s=None):
    """Where shardfs's daemon CPU went in its cold and warm passes, by thread (threads that
    ended during a pass count under "threads gone"), and the cold pass against the cache
    disk's write rate (every fetched byte is written to it): the facts behind issue 36's
    CPU and cold targets."""
    by = {(r["system"], r["pass"]): r for r in rows if not r.get("skipped")}
    passes = [p for p in ("cold", "warm") if ("shardfs", p) in by]
    threads = {p: by[("shardfs", p)].get("serve_cpu_by_thread") for p in passes}
    # An empty dict is a measurement (no thread used 5 ms); None is none.
    if not passes or any(t is None for t in threads.values()):
        return None
    names = sorted({n for t in threads.values() for n in t},
                   key=lambda n: -max(t.get(n, 0.0) for t in threads.values()))
    lines = ["| shardfs daemon thread | " + " | ".join(f"{p} pass CPU s" for p in passes) + " |",
             "|---|" + "---|" * len(passes)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(f"{threads[p].get(n, 0.0):.2f}" for p in passes)
                     + " |")
    gone = []
    for p in passes:
        total = by[("shardfs", p)].get("serve_cpu_s")
        gone.append("-" if total is None else f"{max(total - sum(threads[p].values()), 0.0):.2f}")
    lines.append("| threads gone | " + " | ".join(gone) + " |")
    cold = by.get(("shardfs", "cold"))
    if cold and write_mb_per_s:
        lines.append(f"\ncold pass {cold['mb_per_s']:.0f} MB/s = "
                     f"{cold['mb_per_s'] / write_mb_per_s:.2f}x the cache disk's sequential "
                     f"O_DIRECT write rate in this run ({write_mb_per_s:.0f} MB/s): every fetched "
                     f"byte is written to the cache disk")
    return "\n".join(lines)


def targets_table(targets):
    lines = ["| target (issue 36) | measured | baseline, same run | ratio | goal | met |",
             "|---|---|---|---|---|---|"]
    for t in targets:
        lines.append(f"| {t['target']} | {t['value']:.3f} | {fmt(t['baseline'], '.3f')} "
                     f"| {fmt(t['ratio'], '.2f')} | {t['goal_text']} "
                     f"| {'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def parse_args(argv):
    ap = argparse.ArgumentParser(description="shardfs vs peers benchmark (see bench/README.md)")
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--mean-bytes", type=int, default=110000)
    ap.add_argument("--hashes", default="",
                    help="hashes the MDS index lists, comma-separated (e.g. xxh3_64; default none, "
                         "like MDSWriter: then shardfs checks shards against their ETags)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--shard-bytes", type=int, default=1 << 26)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--workers", type=int, default=4, help="reader processes (DataLoader workers)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--bandwidth-mbps", type=float, default=800.0,
                    help="cap per TCP connection, megabits/s (0 = none)")
    ap.add_argument("--etags", choices=("multipart", "md5", "opaque"), default="multipart",
                    help="ETags the S3 server sends: multipart (default) as S3 gives shards "
                         "uploaded by boto3 or the aws CLI (MDSWriter's uploads), which shardfs "
                         "checks hashless shards against; md5 (single-part uploads); opaque (not "
                         "an MD5, as with SSE-KMS: such shards get only size and structure checks)")
    ap.add_argument("--store-checksums", choices=("crc64nvme", "none"), default="crc64nvme",
                    help="what the S3 server keeps of each object besides its ETag: crc64nvme "
                         "(default; S3 keeps one for every object since December 2024 and answers "
                         "it to a HEAD with checksum mode) or none (an ETag-only store: hashless "
                         "shards are then checked by the ETag's MD5)")
    ap.add_argument("--systems",
                    default="local,shardfs,streaming,s3fs,rclone,mountpoint,egress,jpeg")
    ap.add_argument("--ram-epochs", type=int, default=3,
                    help="epochs in the shardfs `ram` pass (and times the dataset is read in the "
                         "local warm pass it is compared with)")
    ap.add_argument("--jpeg-samples", type=int, default=4000,
                    help="images in the JPEG-decoding pass's dataset (system `jpeg`)")
    ap.add_argument("--data-dir", default=os.path.expanduser("~/.cache/shardfs-bench/data"))
    ap.add_argument("--venv", default=os.path.expanduser("~/.cache/shardfs-bench/venv"))
    ap.add_argument("--out-dir", default=os.path.join(HERE, "out"))
    ap.add_argument("--no-drop-caches", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="300 samples, local + shardfs only, strict checks, seconds")
    ap.add_argument("--micro", action="store_true", help="also run the module micro-benchmarks")
    ap.add_argument("--keep-logs", action="store_true",
                    help="copy the mounts' and servers' logs to OUT/logs/ (with --shardfs-arg=--log-level=debug: a timeline)")
    ap.add_argument("--only-micro", action="store_true")
    ap.add_argument("--shardfs-arg", action="append", default=[],
                    help="extra argument for `shardfs mount` (repeatable)")
    ap.add_argument("--bins", required=True, help="JSON of binary paths (from run.sh)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.samples = min(args.samples, 300)
        args.systems = "local,shardfs"
        args.latency_ms = min(args.latency_ms, 5.0)
        args.no_drop_caches = True
        args.data_dir = os.path.join(tempfile.gettempdir(), f"shardfs-bench-smoke-{os.getpid()}")
    return args


def main(argv):
    args = parse_args(argv)
    bins = json.loads(args.bins)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(ALL_SYSTEMS)
    if unknown:
        raise BenchError(f"unknown systems {sorted(unknown)}; known: {ALL_SYSTEMS}")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    started = datetime.datetime.now(datetime.timezone.utc)
    result = {"date": started.isoformat(timespec="seconds"), "argv": sys.argv,
              "params": {k: v for k, v in vars(args).items() if k != "bins"},
              "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release,
                          "memory": fresh_memory()},
              "commit": subprocess.run(["git", "-C", HERE, "rev-parse", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()}
    procs = Procs()
    workdir = tempfile.mkdtemp(prefix="shardfs-bench-")
    ok = False
    try:
        if args.only_micro:
            result["micro"] = micro(args, bins)
            ok = all(m["rc"] == 0 for m in result["micro"].values())
            return 0 if ok else 1
        layout = dataset(args, bins)
        venv_python = os.path.join(args.venv, "bin", "python")
        if "jpeg" in systems and os.path.exists(venv_python):
            # Before the servers start: they list their files once, at start.
            layout["jpeg"] = jpeg_dataset(args, venv_python, layout)
        result["dataset"] = {"params": layout["params"], "generated": layout["generated"]}
        raw = Server(procs, bins["server"], layout["root"], 0, 0, workdir, "server-raw",
                     args.etags, args.store_checksums)
        link = Server(procs, bins["server"], layout["root"], args.latency_ms,
                      args.bandwidth_mbps, workdir, "server-link", args.etags,
                      args.store_checksums)
        result["store"] = {"etags": args.etags, "checksums": args.store_checksums}
        log(f"raw server {raw.endpoint}; emulated link {link.endpoint} "
            f"({args.latency_ms} ms, {args.bandwidth_mbps} Mbit/s per connection)")
        conns = shardfs_connections(args.shardfs_arg)
        result["shardfs_connections"] = conns
        result["server_curl"] = {
            "raw (no emulation)": measure_server(raw, layout, args.workers, "raw"),
            "emulated link": measure_server(link, layout, args.workers, "link", conns,
                                            shardfs_part_bytes(args.shardfs_arg)),
        }
        procs.stop(raw.proc)
        runner = Runner(args, bins, layout, procs, link, workdir)
        runner.status = None
        for system in systems:
            try:
                getattr(runner, system)()
            except BenchError as e:
                keep_logs(workdir, args.out_dir)
                if args.smoke:
                    raise
                runner.skipped(system, f"FAILED: {e}")
        result["rows"] = runner.rows
        result["notes"] = runner.notes
        result["shardfs_status"] = runner.status
        result["disk_ceiling"] = runner.disk_ceiling
        text = table(runner.rows)
        print(f"\n## shardfs benchmark, {result['date']}\n")
        print(f"dataset: {layout['generated']['samples']} samples, "
              f"{layout['generated']['image_bytes'] / 1e6:.0f} MB of images, "
              f"{layout['generated']['shards']} MDS shards; {args.workers} reader processes, "
              f"batch {args.batch_size}; link: {args.latency_ms} ms first-byte latency, "
              f"{args.bandwidth_mbps} Mbit/s per connection\n")
        mem = result["machine"]["memory"]
        print(f"memory: new pages written at {mem['first_write_gb_per_s']:.1f} GB/s, the same "
              f"pages again at {mem['again_gb_per_s']:.1f} GB/s; free pages reported to a host: "
              + (f"yes (blocks of order {mem['page_reporting_order']})"
                 if mem["page_reporting_order"] is not None else "no") + "\n")
        print(server_table(result["server_curl"]) + "\n")
        if runner.disk_ceiling and runner.disk_ceiling["by_depth"]:
            print(disk_table(runner.disk_ceiling["by_depth"],
                             runner.disk_ceiling["read_bytes"],
                             runner.disk_ceiling.get("write_mb_per_s")) + "\n")
        print(text)
        if any(r["system"].startswith("shardfs ") for r in runner.rows):
            print("\n" + egress_table(runner.rows) + "\n")
        result["targets"] = cold_epoch_targets(
            runner.rows, result["server_curl"], conns,
            (runner.disk_ceiling or {}).get("by_depth"))
        if result["targets"]:
            print("\n" + targets_table(result["targets"]) + "\n")
        threads = daemon_threads_table(runner.rows,
                                       (runner.disk_ceiling or {}).get("write_mb_per_s"))
        if threads:
            print("\n" + threads + "\n")
        disk_text = disk_timeline_table(runner.rows)
        if disk_text:
            print("\n" + disk_text + "\n")
        if any(r["system"].startswith("jpeg ") for r in runner.rows):
            print("\n" + jpeg_table(runner.rows) + "\n")
        for n in runner.notes:
            print(f"\nnote: {n}")
        if args.micro:
            result["micro"] = micro(args, bins)
            for name, m in result["micro"].items():
                if m["rc"] != 0:
                    runner.notes.append(f"micro-benchmark {name} FAILED (exit {m['rc']})")
        failed = [n for n in runner.notes if n.startswith("CHECK FAILED")]
        if args.smoke:
            measured = {r["system"] for r in runner.rows if not r.get("skipped")}
            if not {"local", "shardfs", "null-fuse"} <= measured:
                raise BenchError(
                    f"smoke: expected local, shardfs and null-fuse rows, got {sorted(measured)}")
        if failed and args.smoke:
            raise BenchError("; ".join(failed))
        ok = True
        return 0
    except BenchError as e:
        log(f"FAILED: {e}")
        result["error"] = str(e)
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        procs.cleanup()
        os.makedirs(args.out_dir, exist_ok=True)
        stamp = started.strftime("%Y%m%dT%H%M%SZ")
        name = "smoke" if args.smoke else "results"
        result["ok"] = ok
        path = os.path.join(args.out_dir, f"{name}-{stamp}.json")
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        shutil.copyfile(path, os.path.join(args.out_dir, f"{name}-latest.json"))
        log(f"wrote {path}")
        if args.keep_logs:
            keep_logs(workdir, args.out_dir)
        if ok or args.smoke:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"kept {workdir} (logs) for inspection")
        if args.smoke:
            shutil.rmtree(args.data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
