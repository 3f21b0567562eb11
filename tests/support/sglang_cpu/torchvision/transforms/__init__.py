"""torchvision.transforms stand-in: InterpolationMode as a real enum, the rest unavailable."""

from __future__ import annotations

import enum
from typing import Any

from torchvision import Unavailable

# The names sglang and transformers read at import time (e.g. as default arguments).
InterpolationMode = enum.Enum(
    "InterpolationMode",
    {
        "NEAREST": "nearest",
        "NEAREST_EXACT": "nearest-exact",
        "BILINEAR": "bilinear",
        "BICUBIC": "bicubic",
        "BOX": "box",
        "HAMMING": "hamming",
        "LANCZOS": "lanczos",
    },
)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Unavailable
