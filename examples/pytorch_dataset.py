"""A PyTorch Dataset over one shardfs rank folder, importing nothing from shardfs.

shardfs lays out `MOUNT/rank-R/epoch-E/NNNNNNNN.COLUMN.EXT`: sorted by name, the files are
exactly the samples StreamingDataset would give rank R in epoch E (same shuffle, same
DataLoader workers and batch size as given to `shardfs mount`). So a plain map-style Dataset
over the sorted listing, read with `shuffle=False`, trains on the same stream of samples.

    ds = RankFolder("/mnt/ds", rank=int(os.environ.get("RANK", 0)), epoch=epoch,
                    transform=to_tensors)
    loader = DataLoader(ds, batch_size=32, num_workers=8, shuffle=False)

Columns are decoded from the file extension: .jpg/.png with PIL, .npy with numpy, .txt as
text (numbers as int/float), .json as JSON, .pkl with pickle, .bin as bytes. PIL images do not
batch (`default_collate` takes tensors, numbers and strings): give a `transform` that turns
each sample into tensors, such as `to_tensors` below.

Run as a script it reads one rank folder and prints each sample's `id` column (or its position)
and image shape, one line per sample: `python pytorch_dataset.py MOUNT [RANK] [EPOCH]`.
"""

import io
import json
import os
import pickle

try:
    import torch.utils.data as _tud

    _Base = _tud.Dataset
except ImportError:  # usable without torch, e.g. to inspect a mount
    _Base = object


def _decode(ext, data):
    if ext in ("jpg", "png"):
        from PIL import Image

        return Image.open(io.BytesIO(data)).convert("RGB")
    if ext == "npy":
        import numpy as np

        return np.load(io.BytesIO(data), allow_pickle=False)
    if ext == "txt":
        text = data.decode("utf-8")
        for cast in (int, float):
            try:
                return cast(text)
            except ValueError:
                pass
        return text
    if ext == "json":
        return json.loads(data)
    if ext == "pkl":
        return pickle.loads(data)
    return data


class RankFolder(_Base):
    """Samples of `MOUNT/rank-{rank}/epoch-{epoch}/` in read order, one dict per sample."""

    def __init__(self, mount, rank, epoch=0, columns=None, decode=True, transform=None):
        self.root = os.path.join(mount, f"rank-{rank}", f"epoch-{epoch}")
        self.decode = decode
        self.transform = transform
        groups = {}
        order = []
        for name in sorted(os.listdir(self.root)):
            number, column_ext = name.split(".", 1)
            column, ext = column_ext.rsplit(".", 1)
            if columns is not None and column not in columns:
                continue
            if number not in groups:
                groups[number] = []
                order.append(number)
            groups[number].append((column, ext, name))
        self.samples = [groups[n] for n in order]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        out = {}
        for column, ext, name in self.samples[i]:
            with open(os.path.join(self.root, name), "rb") as f:
                data = f.read()
            out[column] = _decode(ext, data) if self.decode else data
        return self.transform(out) if self.transform else out


def to_tensors(sample, size=None):
    """A sample whose PIL images became uint8 C x H x W tensors (resized to `size`, a
    (width, height), when given: images of different sizes do not batch), so that the
    DataLoader's default collate batches it. Strings, numbers and arrays are kept."""
    import numpy as np
    import torch

    out = {}
    for column, value in sample.items():
        if hasattr(value, "convert"):  # a PIL image
            if size is not None:
                value = value.resize(size)
            value = torch.from_numpy(np.asarray(value).copy()).permute(2, 0, 1)
        out[column] = value
    return out


if __name__ == "__main__":
    import sys

    import torch

    mount = sys.argv[1]
    rank = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    epoch = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    ds = RankFolder(mount, rank=rank, epoch=epoch, transform=to_tensors)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, shuffle=False)
    position = 0
    for batch in loader:
        for i, image in enumerate(batch["image"]):
            ident = int(batch["id"][i]) if "id" in batch else position
            c, h, w = image.shape
            print(ident, f"{h}x{w}x{c}")
            position += 1
