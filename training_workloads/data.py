"""Synthetic datasets of the two articles: a fresh ``torch.randn`` image per sample."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class FakeDataset(Dataset):
    """Random 3xSxS images; labels as in the articles.

    ``label_mode="index"``: ``torch.tensor(index % 10)`` (host-to-device article).
    ``label_mode="random"``: ``torch.randint(0, num_classes, (1,)).item()`` (DDP article).
    """

    def __init__(self, length: int, image_size: int, *, label_mode: str = "index",
                 num_classes: int = 1000) -> None:
        if label_mode not in ("index", "random"):
            raise ValueError(f"label_mode must be 'index' or 'random', not {label_mode!r}")
        self.length = int(length)
        self.image_size = int(image_size)
        self.label_mode = label_mode
        self.num_classes = int(num_classes)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if not 0 <= index < self.length:
            raise IndexError(index)
        img = torch.randn((3, self.image_size, self.image_size))
        if self.label_mode == "index":
            label = torch.tensor(index % 10)
        else:
            label = torch.randint(0, self.num_classes, (1,)).item()
        return img, label
