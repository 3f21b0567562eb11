"""torchvision.transforms.v2.functional stand-in."""

from __future__ import annotations

from typing import Any

from torchvision import Unavailable
from torchvision.transforms import InterpolationMode

__all__ = ["InterpolationMode"]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Unavailable
