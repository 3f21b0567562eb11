"""torchvision.io stand-in."""

from __future__ import annotations

from typing import Any

from torchvision import Unavailable


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Unavailable
