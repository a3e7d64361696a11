"""The host-to-device article's CUDA ``DataPrefetcher``, usable on CPU tensors too.

On a CUDA device the copy of batch N+1 is issued on a side stream (``non_blocking=True``)
as soon as batch N is handed out; ``__next__`` makes the current stream wait for it.  With a
CPU device (or no CUDA) there is no stream and the copy is a plain ``.to(device)``, so the
iterator logic can be tested anywhere.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Iterable, Optional

import torch

from .annotate import noop_annotate


def _to_device(obj: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(o, device, non_blocking) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_device(v, device, non_blocking) for k, v in obj.items()}
    return obj


def _record_stream(obj: Any, stream: "torch.cuda.Stream") -> None:
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _record_stream(o, stream)
    elif isinstance(obj, dict):
        for o in obj.values():
            _record_stream(o, stream)


class DataPrefetcher:
    """Iterate over ``loader`` with each batch already copied to ``device``."""

    def __init__(
        self,
        loader: Iterable,
        device: Any = "cuda",
        *,
        non_blocking: bool = True,
        annotate: Callable[..., ContextManager[None]] = noop_annotate,
    ) -> None:
        self.loader = iter(loader)
        self.device = torch.device(device)
        self.non_blocking = non_blocking
        self.annotate = annotate
        self.stream: Optional[torch.cuda.Stream] = None
        if self.device.type == "cuda" and torch.cuda.is_available():
            self.stream = torch.cuda.Stream(device=self.device)
        self.next_batch: Any = None
        self._exhausted = False
        self.preload()

    def preload(self) -> None:
        try:
            batch = next(self.loader)
        except StopIteration:
            self.next_batch = None
            self._exhausted = True
            return
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                with self.annotate("copy batch", color="yellow"):
                    self.next_batch = _to_device(batch, self.device, self.non_blocking)
        else:
            with self.annotate("copy batch", color="yellow"):
                self.next_batch = _to_device(batch, self.device, False)

    def __iter__(self) -> "DataPrefetcher":
        return self

    def __next__(self) -> Any:
        if self._exhausted and self.next_batch is None:
            raise StopIteration
        if self.stream is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)
            # the batch was allocated on the side stream and is used on the current one
            _record_stream(self.next_batch, current)
        batch = self.next_batch
        self.preload()
        return batch
