#!/usr/bin/env python3
"""One epoch of JPEG decoding through a torch DataLoader, as an image training job loads data.

Every sample is decoded with Pillow, converted to RGB, resized to 224x224 and made a uint8
tensor (CHW), then batched by the DataLoader's default collate. Two sources:
- `--manifest FILE`: one sample per line, `jpeg_path<TAB>label` where label is an integer or
  the path of a file that holds one (a shardfs `.label.txt`); the samples are read in the
  listed order (a shardfs rank folder is already shuffled; shuffle a plain folder beforehand).
- `--remote URL --local DIR`: mosaicml-streaming's StreamingDataset over the MDS dataset
  (shuffle on), decoding its `jpg` column itself.
Prints one JSON object: samples, JPEG bytes read (manifest mode), wall seconds, CPU seconds of
this process and its workers. Run with the bench venv's python.
"""

import argparse
import io
import json
import resource
import time

SIDE = 224


def to_tensor(img):
    import numpy as np
    import torch

    arr = np.asarray(img.convert("RGB").resize((SIDE, SIDE), resample=2))  # 2: bilinear
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


class Files:
    """(jpeg path, label or label file) pairs, decoded on access."""

    def __init__(self, manifest):
        with open(manifest) as f:
            self.items = [line.rstrip("\n").split("\t") for line in f if line.strip()]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        from PIL import Image

        path, label = self.items[i]
        with open(path, "rb") as f:
            data = f.read()
        if not label.lstrip("-").isdigit():
            with open(label) as f:
                label = f.read()
        return to_tensor(Image.open(io.BytesIO(data))), int(label), len(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest")
    ap.add_argument("--remote")
    ap.add_argument("--local")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    from torch.utils.data import DataLoader

    t0 = time.perf_counter()
    if args.manifest:
        ds = Files(args.manifest)
    else:
        from streaming import StreamingDataset

        from sd_reader import drop_index_clients  # this folder is on sys.path (the script's)

        class Decoded(StreamingDataset):
            def __getitem__(self, i):
                s = super().__getitem__(i)
                return to_tensor(s["jpg"]), int(s["label"]), 0

        ds = Decoded(remote=args.remote, local=args.local, shuffle=True,
                     batch_size=args.batch_size)
        drop_index_clients(ds)
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers,
                        shuffle=False)
    samples = nbytes = 0
    for images, labels, sizes in loader:
        assert images.shape[1:] == (3, SIDE, SIDE)
        samples += len(labels)
        nbytes += int(sizes.sum())
    wall = time.perf_counter() - t0
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"samples": samples, "jpeg_bytes": nbytes, "wall_s": wall,
                      "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                      "workers": args.workers}))


if __name__ == "__main__":
    main()
