"""Batches of one shardfs rank folder for JAX, importing nothing from shardfs.

A plain Python iterator: `MOUNT/rank-R/epoch-E/` sorted by name is the order StreamingDataset
would give rank R in epoch E, so it reads the samples in that order, decodes the JPEGs with
PIL, stacks a batch with numpy and hands it to `jax.device_put`.

    for images, labels in batches("/mnt/train", rank=int(os.environ.get("RANK", 0)),
                                  epoch=epoch, batch_size=64):
        ...   # jax.Array: uint8 [64, H, W, 3], int32 [64]

Run as a script it prints each sample's `id` column and image shape, one line per sample:
`python jax_rank_folder.py MOUNT [RANK] [EPOCH]`.
"""

import os

import jax
import numpy as np
from PIL import Image


def batches(mount, rank, epoch=0, batch_size=64, image="image", label="label", size=None):
    """(images, labels) on the default device, `batch_size` samples at a time (the last batch
    may be smaller): the `.jpg` of column `image` as uint8 H x W x 3 (resized to `size`, a
    (width, height), when given, so that images of different sizes stack), the `.txt` of column
    `label` as int32."""
    folder = os.path.join(mount, f"rank-{rank}", f"epoch-{epoch}")
    suffix = f".{image}.jpg"
    numbers = [n[: -len(suffix)] for n in sorted(os.listdir(folder)) if n.endswith(suffix)]
    for start in range(0, len(numbers), batch_size):
        chunk = numbers[start : start + batch_size]
        pixels = []
        values = []
        for n in chunk:
            with Image.open(os.path.join(folder, n + suffix)) as im:
                im = im.convert("RGB")
                pixels.append(np.asarray(im.resize(size) if size else im))
            with open(os.path.join(folder, f"{n}.{label}.txt")) as f:
                values.append(int(f.read()))
        yield jax.device_put(np.stack(pixels)), jax.device_put(np.array(values, np.int32))


if __name__ == "__main__":
    import sys

    mount = sys.argv[1]
    rank = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    epoch = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    for images, ids in batches(mount, rank, epoch, batch_size=4, label="id"):
        for pixels, ident in zip(np.asarray(images), np.asarray(ids)):
            h, w, c = pixels.shape
            print(int(ident), f"{h}x{w}x{c}")
