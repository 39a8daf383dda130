#!/usr/bin/env python3
"""Read every file of a sample list with N worker processes, as DataLoader workers would.

The manifest has one sample per line: its file paths, tab-separated. Samples are grouped in
batches of --batch-size; worker w reads batches w, w+N, w+2N, ... in order (DataLoader hands
batch indices to its workers round-robin), each file opened and read whole, unbuffered.
Prints one JSON object: samples, bytes, payload bytes (files ending in .bin), wall seconds, the
seconds until the first file was read whole, when each worker finished, and the workers' CPU
seconds. Exits non-zero (with the path) if any read fails.
Standard library only, so it runs with any python3.
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

READ_CHUNK = 1 << 20


def read_file(path, buf):
    """Reads `path` to its end into `buf`; returns the byte count."""
    n = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        view = memoryview(buf)
        while True:
            got = os.readv(fd, [view])
            if got == 0:
                return n
            n += got
    finally:
        os.close(fd)


def worker(samples, batch, w, nworkers, out):
    buf = bytearray(READ_CHUNK)
    nbytes = payload = count = 0
    first = None
    try:
        for start in range(w * batch, len(samples), nworkers * batch):
            for files in samples[start:start + batch]:
                for path in files:
                    got = read_file(path, buf)
                    if first is None:
                        first = time.perf_counter()
                    nbytes += got
                    if path.endswith(".bin"):
                        payload += got
                count += 1
    except OSError as e:
        out.put({"error": f"{e.filename or ''}: {e.strerror or e}"})
        return
    cpu = os.times()
    out.put({"samples": count, "bytes": nbytes, "payload_bytes": payload,
             "cpu_s": cpu.user + cpu.system, "first": first, "end": time.perf_counter()})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    with open(args.manifest) as f:
        samples = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    t0 = time.perf_counter()
    procs = [ctx.Process(target=worker, args=(samples, args.batch_size, w, args.workers, out))
             for w in range(args.workers)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        print(f"reader: read failed: {errors[0]}", file=sys.stderr)
        sys.exit(1)
    total = {k: sum(r[k] for r in results) for k in ("samples", "bytes", "payload_bytes", "cpu_s")}
    total["wall_s"] = wall
    # When the first file of the pass had been read whole (CLOCK_MONOTONIC is one clock for
    # all processes): how long a job waits for its first sample.
    firsts = [r["first"] for r in results if r.get("first") is not None]
    total["first_file_s"] = min(firsts) - t0 if firsts else None
    # When each worker read its last file, first to last: workers nothing keeps in step drift
    # apart, and the pass lasts as long as the slowest (the spread shows how unevenly a
    # system served them).
    total["worker_end_s"] = sorted(r["end"] - t0 for r in results)
    total["workers"] = args.workers
    print(json.dumps(total))


if __name__ == "__main__":
    main()
