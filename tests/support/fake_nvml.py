"""A stand-in for nvidia-ml-py (`pynvml`): the answers of a GPU host, for a machine without one.

    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml())            # one H100, idle
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(name=b"NVIDIA L40S", gpus=2, ...))

Only the calls the tuner makes (tuner/host.py) are answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    """What nvidia-ml-py raises for a query the driver does not support."""


@dataclass
class FakePynvml:
    name: bytes = b"NVIDIA H100 80GB HBM3"
    gpus: int = 1
    total: float = 85_520_809_984  # bytes, every GPU
    free: Callable[[int], float] = lambda _handle: 84_900_000_000  # bytes, by GPU
    # (pid, bytes or None) holding memory, by GPU: compute and graphics contexts
    compute: Callable[[int], Sequence[tuple[int, float | None]]] = lambda _handle: ()
    graphics: Callable[[int], Sequence[tuple[int, float | None]]] = lambda _handle: ()
    driver: str | None = "550.54.15"  # None: the driver does not say
    NVMLError: type[Exception] = field(default=NVMLError)

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, _handle: int) -> bytes:
        return self.name

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=self.total, free=self.free(handle))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.compute(handle)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.graphics(handle)]

    def nvmlSystemGetDriverVersion(self) -> str:
        if self.driver is None:
            raise self.NVMLError("Not Supported")
        return self.driver
