"""A PyTorch Dataset over one shardfs rank folder, importing nothing from shardfs.

shardfs lays out `MOUNT/rank-R/epoch-E/NNNNNNNN.COLUMN.EXT`: sorted by name, the files are
exactly the samples StreamingDataset would give rank R in epoch E (same shuffle, same
DataLoader workers and batch size as given to `shardfs mount`). So a plain map-style Dataset
over the sorted listing, read with `shuffle=False`, trains on the same stream of samples.

    ds = RankFolder("/mnt/ds", rank=int(os.environ["RANK"]), epoch=epoch)
    loader = DataLoader(ds, batch_size=32, num_workers=8, shuffle=False)

Columns are decoded from the file extension: .jpg/.png with PIL, .npy with numpy, .txt as
text (numbers as int/float), .json as JSON, .pkl with pickle, .bin as bytes.
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

    def __init__(self, mount, rank, epoch=0, columns=None, decode=True):
        self.root = os.path.join(mount, f"rank-{rank}", f"epoch-{epoch}")
        self.decode = decode
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
        return out


if __name__ == "__main__":
    import sys

    ds = RankFolder(sys.argv[1], rank=int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(len(ds), "samples; first:", {k: type(v).__name__ for k, v in ds[0].items()} if len(ds) else None)
