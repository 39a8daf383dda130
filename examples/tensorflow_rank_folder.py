"""A tf.data pipeline over one shardfs rank folder, importing nothing from shardfs.

`MOUNT/rank-R/epoch-E/` sorted by name is the order StreamingDataset would give rank R in
epoch E, so the pipeline keeps that order: the file list comes sorted from `os.listdir` (not
`tf.data.Dataset.list_files`, which shuffles by default) and `map` runs deterministically.

    ds = rank_dataset("/mnt/train", rank=int(os.environ.get("RANK", 0)), epoch=epoch)
    for images, labels in ds.batch(64).prefetch(tf.data.AUTOTUNE):
        ...

Run as a script it prints each sample's `id` column and image shape, one line per sample:
`python tensorflow_rank_folder.py MOUNT [RANK] [EPOCH]`.
"""

import os

import tensorflow as tf


def rank_dataset(mount, rank, epoch=0, image="image", label="label", size=None):
    """(image, label) pairs of `MOUNT/rank-{rank}/epoch-{epoch}/` in read order: the `.jpg` of
    column `image` decoded to uint8 H x W x 3 (resized to `size`, a (height, width), when given,
    so that batches stack), the `.txt` of column `label` as an int64."""
    folder = os.path.join(mount, f"rank-{rank}", f"epoch-{epoch}")
    suffix = f".{image}.jpg"
    images = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(suffix)]
    labels = [p[: -len(suffix)] + f".{label}.txt" for p in images]

    def load(image_path, label_path):
        pixels = tf.io.decode_jpeg(tf.io.read_file(image_path), channels=3)
        if size is not None:
            pixels = tf.cast(tf.image.resize(pixels, size), tf.uint8)
        value = tf.strings.to_number(tf.strings.strip(tf.io.read_file(label_path)), tf.int64)
        return pixels, value

    files = tf.data.Dataset.from_tensor_slices((images, labels))
    return files.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


if __name__ == "__main__":
    import sys

    mount = sys.argv[1]
    rank = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    epoch = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    for images, ids in rank_dataset(mount, rank, epoch, label="id").batch(4):
        for pixels, ident in zip(images.numpy(), ids.numpy()):
            h, w, c = pixels.shape
            print(int(ident), f"{h}x{w}x{c}")
