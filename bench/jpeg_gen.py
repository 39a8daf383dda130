#!/usr/bin/env python3
"""Writes the bench's JPEG dataset: photo-like JPEG files made with Pillow, as plain files in
class folders and as an MDS dataset written by mosaicml-streaming's own MDSWriter.

Each image is a random low-frequency colour field (a small random image scaled up bicubically)
with grain on top, saved at the given JPEG quality: it compresses about as a photo does (tens
of kilobytes at 500x375), unlike noise (incompressible) or flat colour (a few hundred bytes).
The MDS dataset stores each file's bytes as they are (`jpeg` column, fed the opened file so
MDSWriter keeps its bytes instead of re-encoding) with an `int` label. Run with the bench venv's
python (Pillow, numpy, mosaicml-streaming). Prints one JSON object: samples, bytes, shards.

`jpeg_gen.py --out DIR --samples N [--seed S] [--width W --height H] [--quality Q]`
writes DIR/plain/class-CC/NNNNNNNN.jpg and DIR/mds/ (index.json, shard.*.mds).
"""

import argparse
import json
import os

import numpy as np
from PIL import Image


def photo_like(rng, width, height):
    """A smooth random colour field with grain (uint8 RGB)."""
    small = rng.integers(0, 256, size=(max(2, height // 24), max(2, width // 24), 3),
                         dtype=np.uint8)
    field = np.asarray(Image.fromarray(small).resize((width, height), Image.BICUBIC),
                       dtype=np.int16)
    grain = rng.normal(0, 6, size=field.shape).astype(np.int16)
    return Image.fromarray(np.clip(field + grain, 0, 255).astype(np.uint8))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--shard-bytes", type=int, default=1 << 26)
    args = ap.parse_args()

    from streaming import MDSWriter

    rng = np.random.default_rng(args.seed)
    plain = os.path.join(args.out, "plain")
    mds = os.path.join(args.out, "mds")
    total = 0
    with MDSWriter(out=mds, columns={"jpg": "jpeg", "label": "int"},
                   size_limit=args.shard_bytes) as writer:
        for i in range(args.samples):
            label = int(rng.integers(0, args.classes))
            folder = os.path.join(plain, f"class-{label:02d}")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"{i:08d}.jpg")
            photo_like(rng, args.width, args.height).save(path, "JPEG", quality=args.quality)
            total += os.path.getsize(path)
            with Image.open(path) as img:  # a JpegImageFile with a filename: stored as is
                writer.write({"jpg": img, "label": label})
    with open(os.path.join(mds, "index.json")) as f:
        shards = len(json.load(f)["shards"])
    print(json.dumps({"samples": args.samples, "jpeg_bytes": total, "shards": shards}))


if __name__ == "__main__":
    main()
