"""Which files of an image folder are images: their suffixes. Kept apart from the image reader,
which brings Beam, so that ``init`` can tell a folder of images from one of data files without
importing it."""

from __future__ import annotations

__all__ = ["DEFAULT_EXTENSIONS"]

DEFAULT_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
