#!/usr/bin/env python3
"""One epoch of mosaicml-streaming's StreamingDataset through a torch DataLoader.

Reads the MDS dataset at --remote (s3://..., endpoint from S3_ENDPOINT_URL) into --local,
with shuffle on (same seed and algorithm defaults as `shardfs mount --shuffle`), --workers
DataLoader workers and --batch-size per batch. Prints one JSON object: samples, payload bytes
(the `image` column), wall seconds, CPU seconds of this process and its workers, and peak RSS.
Run it twice with the same --local for cold (empty cache) and warm (shards already local).
With --epochs N it reads N epochs from one dataset object (one JSON object per epoch) and, with
--stats-url, adds the bytes the bench S3 server sent during each epoch (`fetched_bytes`);
--cache-limit is StreamingDataset's own `cache_limit` (bytes).
"""

import argparse
import json
import os
import resource
import time
import urllib.request


def server_bytes(url):
    """Body bytes the bench S3 server has sent so far (its /__bench/stats)."""
    if not url:
        return None
    with urllib.request.urlopen(url) as r:
        return json.load(r)["body_bytes"]


def drop_index_clients(ds):
    """Makes a StreamingDataset safe to fork into DataLoader workers.

    StreamingDataset 0.13 keeps the boto3 client that fetched index.json, with its pooled
    keep-alive connection, and DataLoader workers fork with it: several processes then share
    one TCP connection and responses interleave (seen here as shards with missing and foreign
    4-16 KiB runs; over HTTPS the TLS errors make it retry). Dropping the client before forking
    makes each worker open its own connections.
    """
    for stream in getattr(ds, "streams", []):
        downloader = getattr(stream, "_downloader", None)
        if downloader is not None and hasattr(downloader, "clean_up"):
            downloader.clean_up()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--remote", required=True)
    ap.add_argument("--local", required=True)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--cache-limit", type=int, default=None)
    ap.add_argument("--stats-url", default=None)
    ap.add_argument("--shuffle-block-size", type=int, default=None)
    args = ap.parse_args()

    t_import = time.perf_counter()
    from streaming import StreamingDataset
    from torch.utils.data import DataLoader
    import_s = time.perf_counter() - t_import

    t0 = time.perf_counter()
    ds = StreamingDataset(remote=args.remote, local=args.local, shuffle=True,
                          batch_size=args.batch_size, cache_limit=args.cache_limit,
                          shuffle_block_size=args.shuffle_block_size)
    drop_index_clients(ds)
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers,
                        persistent_workers=False)
    for epoch in range(args.epochs):
        fetched0 = server_bytes(args.stats_url)
        samples = payload = label_bytes = 0
        first = None
        for batch in loader:
            if first is None:
                first = time.perf_counter() - t0
            images = batch["image"]
            samples += len(images)
            payload += sum(len(b) for b in images)
            label_bytes += 8 * len(images)
        wall = time.perf_counter() - t0
        fetched1 = server_bytes(args.stats_url)
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(json.dumps({
            "epoch": epoch,
            "samples": samples,
            "bytes": payload + label_bytes,
            "payload_bytes": payload,
            "wall_s": wall,
            # Until the first batch (DataLoader workers started, their first shards fetched).
            "first_batch_s": first,
            "import_s": import_s,
            "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
            "peak_rss_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024.0,
            "workers": args.workers,
            "fetched_bytes": None if fetched0 is None else fetched1 - fetched0,
        }), flush=True)
        t0 = time.perf_counter()


if __name__ == "__main__":
    main()
