"""A stand-in for torchvision: importable, so that sglang's multimodal modules load.

PyPI's torchvision wheel fails to load beside a CPU build of torch (its compiled operators do
not register). Text-only serving never calls torchvision; anything used raises
NotImplementedError so that a model that needs it fails with a clear message.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.0.0+sglang-tuner-standin"


class Unavailable:
    """Any torchvision class or function: constructing or calling it raises."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "torchvision is a stand-in in sglang-tuner's CPU environment (text models only)"
        )


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Unavailable
