"""Images this process produced, kept in memory by artifact key so scoring skips the PNG trip.

A generate op stores every image as a PNG artifact (the durable copy, for clients and other
processes) and also puts the decoded image here; a score op in the same process takes it from
here instead of reading and decoding the PNG it just wrote. PNG is lossless and the pipeline's
images are RGB, so both paths give the evaluator the same pixels. Bounded (least recently used
first out), so a long-lived worker does not grow without limit; anything evicted, or made by
another process, is read from the artifact store as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class ImageCache:
    """LRU map from artifact key to a PIL image, at most ``maxsize`` entries."""

    def __init__(self, maxsize: int = 512) -> None:
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._images: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._images)

    def put(self, key: str, image: Any) -> None:
        with self._lock:
            self._images[key] = image
            self._images.move_to_end(key)
            while len(self._images) > self.maxsize:
                self._images.popitem(last=False)

    def get(self, key: str) -> Any | None:
        """The image, or ``None`` if this process did not make it (or evicted it)."""
        with self._lock:
            image = self._images.get(key)
            if image is None:
                self.misses += 1
                return None
            self._images.move_to_end(key)
            self.hits += 1
            return image
