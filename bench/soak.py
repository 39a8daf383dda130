#!/usr/bin/env python3
"""shardfs soak and fault run: many readers, several ranks and epochs, a cache a third of the
dataset, against the bench S3 server injecting faults; every byte checked.

The dataset (bench-gen, hashless like MDSWriter's default, served with multipart ETags as
`aws s3 cp` uploads them) is mounted twice with the same ordering options: through the faulty
server (the mount under test) and from its local folder (the reference, no network). In the
default `loader` pattern the reader processes are the DataLoader workers of the ranks: each
rank's workers share its `rank-R/epoch-E/` folder batch by batch and go on epoch after epoch;
in the `scattered` pattern each reader takes a (rank, epoch) pair of its own and reads the whole
folder, so many epochs of one rank are in flight at once. Every file is compared with the
reference's file of the same name (each file's cached pages dropped
first, so every read reaches the daemon). A read that fails (EIO) is counted
and tried again once a second later (recovered or not). The daemon's RSS and open file
descriptors are sampled every second. Printed at the end (and written as JSON): reads, bytes,
faults injected by kind, wrong bytes, EIOs and recoveries, verification failures the mount
caught, RSS and fds over the first and the last window, files read per minute. Exit status 1 when any byte was wrong
or an EIO did not recover.

Run through bench/soak.sh (it builds the binaries); `--short` is the minute-long CI mode.
"""

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import ACCESS_KEY, SECRET_KEY, BUCKET, Procs, wait_for, log  # noqa: E402


def status_field(pid, name):
    """An integer field of /proc/PID/status (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kb(pid):
    return status_field(pid, "VmRSS")


def threads(pid):
    return status_field(pid, "Threads")


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def fd_kinds(pid):
    """The process's open descriptors by kind: sockets, cache shard files (and how many of
    those were deleted, i.e. evicted while still open), and the rest."""
    kinds = {"sockets": 0, "shard_files": 0, "deleted_files": 0, "other": 0}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return kinds
    for n in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError:
            continue
        if target.startswith("socket:"):
            kinds["sockets"] += 1
        elif "/shards/" in target:
            kinds["shard_files"] += 1
            kinds["deleted_files"] += target.endswith(" (deleted)")
        else:
            kinds["other"] += 1
    return kinds


COUNTERS = ("bytes_fetched", "shards_fetched", "disk_hits", "disk_misses", "evictions",
            "verify_failures", "repaired_downloads", "fill_failures")


def cache_counters(mnt):
    """The mount's cache counters from status.json (empty when it cannot be read)."""
    try:
        with open(os.path.join(mnt, ".shardfs", "status.json")) as f:
            cache = json.load(f)["cache"][0]
        return {k: cache.get(k, 0) for k in COUNTERS}
    except (OSError, ValueError, KeyError, IndexError):
        return {}


def buffer_kb(mnt):
    """KiB the mount holds in its bounded buffers now (memory tier, samples read ahead,
    shards being downloaded and download buffers kept for the next ones, all bounded by
    --memory-limit) and the daemon's `memory` section (allocator and page pool bytes), both
    from status.json; None for what is unreadable."""
    try:
        with open(os.path.join(mnt, ".shardfs", "status.json")) as f:
            status = json.load(f)
        parts = {k: sum(c.get(k, 0) for c in status["cache"]) for k in BUFFER_PARTS}
        memory = dict(status.get("memory") or {}, **parts)
        return sum(parts.values()) / 1024, memory
    except (OSError, ValueError, KeyError, TypeError):
        return None, None


# The bounded buffers of status.json's `cache` sections (summed over streams).
BUFFER_PARTS = ("memory_tier_bytes", "downloading_bytes", "idle_download_buffer_bytes",
                "read_ahead_bytes")

# The parts of status.json's `memory` section reported per minute, and the bounded buffers.
MEMORY_PARTS = ("heap_in_use_bytes", "heap_mapped_bytes", "heap_free_bytes",
                "page_pool_mapped_bytes", "page_pool_free_bytes") + BUFFER_PARTS


def memory_per_minute(memory_samples, minutes):
    """Mean MB of each part of the daemon's memory in each minute (None when unknown)."""
    out = {}
    for part in MEMORY_PARTS:
        row = []
        for k in range(minutes):
            xs = [m[part] for t, m in memory_samples
                  if 60 * k <= t < 60 * (k + 1) and m and m.get(part) is not None]
            row.append(round(sum(xs) / len(xs) / 1e6, 1) if xs else None)
        out[part.replace("_bytes", "_mb")] = row
    return out


def quantiles(xs):
    """Median, 90th percentile and maximum of `xs` (seconds, rounded), or None."""
    if not xs:
        return None
    xs = sorted(xs)
    return {"median": round(xs[len(xs) // 2], 4), "p90": round(xs[int(len(xs) * 0.9)], 4),
            "max": round(xs[-1], 4)}


def counters_per_minute(counters, minutes):
    """How much each cache counter grew in each minute (from the 10-second samples)."""
    out = []
    prev = {k: 0 for k in COUNTERS}
    for k in range(minutes):
        inside = [c for t, c in counters if t < 60 * (k + 1) and c]
        if not inside:
            out.append({})
            continue
        cur = inside[-1]
        out.append({n: cur[n] - prev[n] for n in COUNTERS})
        prev = cur
    return out


def loader_folders(wid, readers, ranks, epochs, batch):
    """The `loader` pattern: reader `wid` is one of the DataLoader workers of rank
    `wid % ranks`; each worker reads every `workers`-th batch of its rank's epoch folder, then
    the next epoch (wrapping after the last listed one), as a training job's loader does."""
    rank, workers = wid % ranks, max(1, readers // ranks)
    worker = (wid // ranks) % workers
    e = 0
    while True:
        yield rank, e % epochs, lambda i: (i // batch) % workers == worker
        e += 1


def scattered_folders(jobs):
    """The `scattered` pattern: each reader takes the next (rank, epoch) folder from the shared
    queue and reads all of it, so as many epochs are in flight as there are readers per rank."""
    while True:
        try:
            rank, epoch = jobs.get(timeout=1)
        except Exception:
            yield None
            continue
        yield rank, epoch, lambda i: True


def reader(wid, folders, mnt, ref, start, deadline, out):
    """Reads the files `folders` assigns until the deadline; compares each with `ref`."""
    stats = {"files": 0, "bytes": 0, "wrong_files": 0, "wrong_bytes": 0, "eio": 0,
             "recovered": 0, "unrecovered": 0, "examples": [],
             "files_per_minute": [0] * max(1, math.ceil((deadline - start) / 60))}
    for job in folders:
        if time.time() >= deadline:
            break
        if job is None:
            continue
        rank, epoch, mine = job
        rel = f"rank-{rank}/epoch-{epoch}"
        try:
            names = sorted(os.listdir(os.path.join(ref, rel)))
        except OSError as e:
            stats["examples"].append(f"list {rel}: {e}")
            continue
        for name in (n for i, n in enumerate(names) if mine(i)):
            if time.time() >= deadline:
                break
            try:
                with open(os.path.join(ref, rel, name), "rb") as f:
                    want = f.read()
            except OSError as e:  # the reference mount is local: this is the harness's fault
                stats["examples"].append(f"reference {rel}/{name}: {e}")
                break
            got = None
            for attempt in range(2):
                try:
                    with open(os.path.join(mnt, rel, name), "rb") as f:
                        # A sample is one inode in every epoch: drop its cached pages so the
                        # read reaches the daemon, as in a dataset larger than RAM.
                        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                        got = f.read()
                    if attempt == 1:
                        stats["recovered"] += 1
                    break
                except OSError as e:
                    if attempt == 0:
                        stats["eio"] += 1
                        time.sleep(1)
                    else:
                        stats["unrecovered"] += 1
                        if len(stats["examples"]) < 5:
                            stats["examples"].append(f"{rel}/{name}: {e}")
            if got is None:
                continue
            stats["files"] += 1
            stats["bytes"] += len(got)
            minute = min(int((time.time() - start) // 60), len(stats["files_per_minute"]) - 1)
            stats["files_per_minute"][minute] += 1
            if got != want:
                stats["wrong_files"] += 1
                n = min(len(got), len(want))
                stats["wrong_bytes"] += sum(1 for i in range(n) if got[i] != want[i]) + abs(
                    len(got) - len(want))
                if len(stats["examples"]) < 5:
                    stats["examples"].append(f"{rel}/{name}: wrong bytes")
    out.put(stats)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bins", required=True, help="JSON of binary paths (from soak.sh)")
    ap.add_argument("--short", action="store_true", help="about a minute, for CI")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--readers", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=4, help="ranks served by the mount")
    ap.add_argument("--pattern", choices=("loader", "scattered"), default="loader",
                    help="loader: the readers are each rank's DataLoader workers, sharing "
                         "its epoch folder batch by batch, epoch after epoch; scattered: each "
                         "reader reads a whole (rank, epoch) folder of its own, so many epochs "
                         "of a rank are read at once (a cache-thrashing stress pattern)")
    ap.add_argument("--samples", type=int, default=6000)
    ap.add_argument("--mean-bytes", type=int, default=20000)
    ap.add_argument("--shard-bytes", type=int, default=1 << 21)
    ap.add_argument("--fault-rate", type=float, default=None,
                    help="share of GETs faulted (default 0.3; 0.2 with --short)")
    ap.add_argument("--memory-limit", type=int, default=16 << 20,
                    help="the mount's --memory-limit: half for shards being downloaded (8 MiB, "
                         "a part per connection), half for the memory tier, small so that it "
                         "fills within seconds and RSS growth after that shows leaks")
    ap.add_argument("--part-bytes", type=int, default=None,
                    help="the mount's --fetch-part-size (default: a quarter of --shard-bytes, "
                         "so shards come as parallel ranged parts, as 64 MiB shards do)")
    ap.add_argument("--stall-ms", type=int, default=1000,
                    help="how long a stalled answer waits (longer than --stall-timeout)")
    ap.add_argument("--stall-timeout", type=float, default=0.5,
                    help="the mount's --stall-timeout: stalled connections are given up after it")
    ap.add_argument("--shardfs-arg", action="append", default=[],
                    help="extra argument for the mount under test (repeatable)")
    ap.add_argument("--window-s", type=float, default=60.0,
                    help="first/last window compared for RSS and fds")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args()
    if args.short:
        args.minutes, args.readers, args.samples, args.window_s = 1.0, 16, 2000, 15.0
    if args.fault_rate is None:
        args.fault_rate = 0.2 if args.short else 0.3
    bins = json.loads(args.bins)
    procs = Procs()
    work = tempfile.mkdtemp(prefix="shardfs-soak-")
    try:
        return run(args, bins, procs, work)
    finally:
        procs.cleanup()
        # The mount's log (warnings: rejected downloads, failed fills) next to the report.
        try:
            os.makedirs(args.out, exist_ok=True)
            shutil.copy(os.path.join(work, "mount.log"), os.path.join(args.out, "soak-mount.log"))
        except OSError:
            pass
        shutil.rmtree(work, ignore_errors=True)


def run(args, bins, procs, work):
    data = os.path.join(work, "s3root", BUCKET)
    os.makedirs(data)
    gen = subprocess.run([bins["gen"], "--out", data, "--samples", str(args.samples),
                          "--mean-bytes", str(args.mean_bytes), "--shard-bytes",
                          str(args.shard_bytes), "--seed", "7"],
                         capture_output=True, text=True, check=True)
    dataset_bytes = sum(os.path.getsize(os.path.join(r, f))
                        for r, _, fs in os.walk(os.path.join(data, "mds")) for f in fs)
    log(f"dataset: {args.samples} samples, {dataset_bytes / 1e6:.1f} MB of shards ({gen.stdout.strip()[:80]})")
    shutil.rmtree(os.path.join(data, "plain"), ignore_errors=True)

    srv_out = open(os.path.join(work, "server.out"), "w+")
    server = procs.start([bins["server"], os.path.join(work, "s3root"), "--latency-ms", "2",
                          "--etags", "multipart", "--fault-rate", str(args.fault_rate),
                          "--stall-ms", str(args.stall_ms), "--fault-seed", "42"],
                         stdout=srv_out, stderr=open(os.path.join(work, "server.err"), "w"))
    endpoint = None

    def up():
        nonlocal endpoint
        if server.poll() is not None:
            raise RuntimeError("bench S3 server exited")
        srv_out.seek(0)
        text = srv_out.read()
        if "listening on " in text:
            endpoint = text.split("listening on ", 1)[1].split()[0]
            return True
        return False
    wait_for(up, 60, "the bench S3 server")

    epochs = 50
    batch = 8
    order = ["--shuffle", "--ranks-per-node", str(args.ranks), "--workers", "2",
             "--batch-size", str(batch), "--epochs", str(epochs)]
    mnt, ref = os.path.join(work, "mnt"), os.path.join(work, "ref")
    os.makedirs(mnt)
    os.makedirs(ref)
    limit = max(dataset_bytes // 3, 4 * args.shard_bytes)
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_REGION="us-east-1")
    env.pop("AWS_CA_BUNDLE", None)
    m = procs.start([bins["shardfs"], "mount", f"s3://{BUCKET}/mds", mnt, "--foreground",
                     "--endpoint-url", endpoint, "--cache-dir", os.path.join(work, "cache"),
                     "--cache-limit", str(limit), "--memory-limit", str(args.memory_limit),
                     "--fetch-part-size", str(args.part_bytes or max(1, args.shard_bytes // 4)),
                     "--stall-timeout", str(args.stall_timeout),
                     "--log-level", "warn"] + order + args.shardfs_arg,
                    env=env, stderr=open(os.path.join(work, "mount.log"), "w"))
    procs.mounts.append(mnt)
    r = procs.start([bins["shardfs"], "mount", os.path.join(data, "mds"), ref, "--foreground",
                     "--cache-dir", os.path.join(work, "cache-ref")] + order,
                    stderr=subprocess.DEVNULL)
    procs.mounts.append(ref)
    wait_for(lambda: os.path.ismount(mnt) and os.path.ismount(ref), 120, "the two mounts")
    log(f"mounted; cache limit {limit / 1e6:.1f} MB (a third of the dataset), "
        f"{args.readers} readers ({args.pattern} pattern), {args.minutes} min, "
        f"fault rate {args.fault_rate}")

    ctx = mp.get_context("fork")
    jobs, out = ctx.Queue(), ctx.Queue()
    # Most jobs are never taken: do not wait at exit to flush them into the pipe.
    jobs.cancel_join_thread()
    for e in range(epochs):
        for rank in range(args.ranks):
            jobs.put((rank, e))
    start = time.time()
    deadline = start + args.minutes * 60

    def folders(i):
        if args.pattern == "loader":
            return loader_folders(i, args.readers, args.ranks, epochs, batch)
        return scattered_folders(jobs)
    workers = [ctx.Process(target=reader, args=(i, folders(i), mnt, ref, start, deadline, out))
               for i in range(args.readers)]
    for w in workers:
        w.start()
    # The daemon's RSS, fds and threads every second from a thread of their own: /proc reads
    # take microseconds, while status.json (read below for the buffers and counters) waits
    # behind the readers' requests, and an uneven sampling would weigh some moments more.
    samples, buffer_samples, kinds, counters, status_reads = [], [], [], [], []
    memory_samples = []

    def sample_proc():
        while time.time() < deadline:
            samples.append((time.time() - start, rss_kb(m.pid), fds(m.pid), threads(m.pid)))
            time.sleep(1)
    sampler = threading.Thread(target=sample_proc, daemon=True)
    sampler.start()
    next_counters = start + 10
    while time.time() < deadline:
        # RSS read right after the buffers, so the two describe the same moment.
        asked = time.time()
        buffers, memory = buffer_kb(mnt)
        status_reads.append(time.time() - asked)
        buffer_samples.append((time.time() - start, rss_kb(m.pid), buffers))
        memory_samples.append((time.time() - start, memory))
        # Every 10 s by the clock (a status.json read may be slow: not every 10th read).
        if time.time() >= next_counters:
            next_counters += 10
            kinds.append(fd_kinds(m.pid))
            counters.append((time.time() - start, cache_counters(mnt)))
        time.sleep(1)
    sampler.join()
    results = [out.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(30)
    elapsed = time.time() - start

    def window(lo, hi):
        xs = [s for s in samples if lo <= s[0] < hi]
        if not xs:
            return {"rss_mb": None, "fds": None, "rss_outside_buffers_mb": None}
        rest = [r - b for t, r, b in buffer_samples if lo <= t < hi and b is not None]
        return {"rss_mb": round(sum(s[1] for s in xs) / len(xs) / 1024, 1),
                "fds": round(sum(s[2] for s in xs) / len(xs), 1),
                # RSS less what the bounded buffers (memory tier, read-ahead, downloads) held then.
                "rss_outside_buffers_mb": round(sum(rest) / len(rest) / 1024, 1)
                if rest else None}
    first = window(0, args.window_s)
    last = window(elapsed - args.window_s, elapsed + 1)
    stats = json.loads(subprocess.run(["curl", "-sf", f"{endpoint}/__bench/stats"],
                                      capture_output=True, text=True, check=True).stdout)
    with open(os.path.join(mnt, ".shardfs", "status.json")) as f:
        status = json.load(f)
    total = {k: sum(x[k] for x in results) for k in
             ("files", "bytes", "wrong_files", "wrong_bytes", "eio", "recovered", "unrecovered")}
    cache = status["cache"][0]
    report = {
        "minutes": round(elapsed / 60, 2), "readers": args.readers, "ranks": args.ranks,
        "pattern": args.pattern,
        "dataset_mb": round(dataset_bytes / 1e6, 1), "cache_limit_mb": round(limit / 1e6, 1),
        "fault_rate": args.fault_rate, **total,
        # How long reading status.json took while the readers ran: requests that wait for
        # the store must not hold up the mount's other requests.
        "status_read_s": quantiles(status_reads),
        "files_per_s": round(total["files"] / elapsed, 1),
        "faults_injected": stats.get("faults", {}),
        "faults_total": sum(stats.get("faults", {}).values()),
        "server_gets": stats["gets"], "fetched_mb": round(cache["bytes_fetched"] / 1e6, 1),
        "shards_fetched": cache["shards_fetched"], "evictions": cache["evictions"],
        "verify_failures_caught": cache["verify_failures"],
        # Rejected downloads made whole by fetching their parts again (not the whole shard).
        "repaired_downloads": cache.get("repaired_downloads", 0),
        "parts_refetched": cache.get("parts_refetched", 0),
        "fill_failures": cache["fill_failures"], "shard_errors": status["errors"]["count"],
        # Requests the mount answered with EIO, by kind (read / size look-up), repeats included.
        "eio_answers": status["errors"].get("answers", {}),
        "rss_fds_first_window": first, "rss_fds_last_window": last,
        "rss_mb_per_minute": [window(60 * k, 60 * (k + 1))["rss_mb"]
                              for k in range(int(elapsed // 60) + 1)],
        "fds_per_minute": [window(60 * k, 60 * (k + 1))["fds"]
                           for k in range(int(elapsed // 60) + 1)],
        "rss_outside_buffers_mb_per_minute": [
            window(60 * k, 60 * (k + 1))["rss_outside_buffers_mb"]
            for k in range(int(elapsed // 60) + 1)],
        "rss_mb_max": round(max((x[1] for x in samples), default=0) / 1024, 1),
        # What the memory is made of, per minute (status.json's `memory`): malloc's bytes in
        # use and free (glibc builds), the page pool's mapped and free bytes.
        "memory_parts_mb_per_minute": memory_per_minute(memory_samples,
                                                        int(elapsed // 60) + 1),
        "threads_per_minute": [max((s[3] for s in samples if 60 * k <= s[0] < 60 * (k + 1)),
                                   default=None) for k in range(int(elapsed // 60) + 1)],
        # Every second's sample: seconds, RSS MB, open fds, threads.
        "samples": [[round(t, 1), round(r / 1024, 1), n, th] for t, r, n, th in samples],
        # The cache's work in each minute: downloads, hits, evictions, rejected transfers.
        "cache_per_minute": counters_per_minute(counters, int(elapsed // 60) + 1),
        "fds_max": max((x[2] for x in samples), default=0),
        # Sampled every 10 s: the most of each kind seen, and the last sample.
        "fd_kinds_max": {k: max((x[k] for x in kinds), default=0)
                         for k in ("sockets", "shard_files", "deleted_files", "other")},
        "fd_kinds_last": kinds[-1] if kinds else {},
        # Files read in each minute of the run (a last partial minute counts as one).
        "files_per_minute": [sum(x["files_per_minute"][k] for x in results)
                             for k in range(len(results[0]["files_per_minute"]))]
        if results else [],
        "examples": sum((x["examples"] for x in results), [])[:10],
    }
    # Growth first minute -> last minute (the measure, which includes the warm-up of
    # the memory tier and the page-sized pools), and second minute -> last (steady state).
    per_min = [r for r in report["rss_mb_per_minute"] if r]
    report["rss_growth_pct"] = (round(100 * (last["rss_mb"] / first["rss_mb"] - 1), 1)
                                if first["rss_mb"] and last["rss_mb"] else None)
    report["rss_growth_after_first_minute_pct"] = (
        round(100 * (last["rss_mb"] / per_min[1] - 1), 1) if len(per_min) > 2 else None)
    # The same first -> last growth without the bounded buffers (which fill in the first
    # minute by design): what a leak would show in.
    a, b = first["rss_outside_buffers_mb"], last["rss_outside_buffers_mb"]
    report["rss_outside_buffers_growth_pct"] = (round(100 * (b / a - 1), 1) if a and b
                                                else None)
    os.makedirs(args.out, exist_ok=True)
    name = "soak-short.json" if args.short else "soak-latest.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    ok = total["wrong_bytes"] == 0 and total["unrecovered"] == 0 and total["files"] > 0
    print(f"\nsoak: {total['files']} files read, {report['faults_total']} faults injected, "
          f"{total['wrong_bytes']} wrong bytes, {total['eio']} EIO ({total['recovered']} "
          f"recovered, {total['unrecovered']} not), RSS {first['rss_mb']} -> {last['rss_mb']} MB "
          f"({report['rss_growth_pct']} %; {report['rss_growth_after_first_minute_pct']} % after "
          f"the first minute; outside the bounded buffers (memory tier, read-ahead, downloads) "
          f"{first['rss_outside_buffers_mb']} -> {last['rss_outside_buffers_mb']} MB, "
          f"{report['rss_outside_buffers_growth_pct']} %), "
          f"fds {first['fds']} -> {last['fds']}, status.json read in "
          f"{(report['status_read_s'] or {}).get('median')} s median, "
          f"{(report['status_read_s'] or {}).get('max')} s at most, files per minute "
          f"{report['files_per_minute'][0]} -> {report['files_per_minute'][-1]}: "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
