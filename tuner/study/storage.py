"""The study's storage as the tuner holds it: every call inside `deferred()`, trial ids by number.

`signal_safe(storage)` wraps the storage a command opened (tuner/results/storage.py) in a class
that delegates each storage method to it and runs the call inside `deferred()`, so a stop signal
never lands inside a write (tuner/signals.py says why). The loop keeps the wrapper in hand
and passes it down; trial ids come from the storage's public lookups, not from Optuna's private
`Trial._trial_id`.

    storage = signal_safe(open_storage(None, "qwen-mtp", create=True))
    study = optuna.create_study(study_name="qwen-mtp", storage=storage, load_if_exists=True)
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import optuna
from optuna.storages import BaseStorage, get_storage

# Optuna 5 has no public heartbeat base class: `fail_stale_trials` and the RDB heartbeat look
# for this one with isinstance, so the wrapper of a storage with heartbeats must be one too
# (docs/design.md#optunas-private-names).
from optuna.storages._heartbeat import BaseHeartbeat

from tuner.signals import deferred

_Cls = TypeVar("_Cls", bound=type)


def _public_methods(cls: type) -> tuple[str, ...]:
    return tuple(n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_"))


def _forwarding(names: tuple[str, ...]) -> Callable[[_Cls], _Cls]:
    """Give the class a method per name that calls the wrapped storage's inside `deferred()`."""

    def forward(name: str) -> Callable[..., Any]:
        def method(self: SignalSafeStorage, *args: Any, **kwargs: Any) -> Any:
            with deferred():
                return getattr(self.inner, name)(*args, **kwargs)

        method.__name__ = name
        method.__doc__ = f"The wrapped storage's `{name}`, a stop signal deferred to its end."
        return method

    def decorate(cls: _Cls) -> _Cls:
        for name in names:
            setattr(cls, name, forward(name))
        abc.update_abstractmethods(cls)
        return cls

    return decorate


@_forwarding(_public_methods(BaseStorage))
class SignalSafeStorage(BaseStorage):
    """A storage whose every call runs inside `deferred()` (a stop signal waits for its end)."""

    def __init__(self, inner: BaseStorage) -> None:
        self.inner = inner

    def heartbeat_interval(self) -> int | None:
        """Seconds between Optuna's own heartbeats (RDB with --heartbeat), or None."""
        return None


# `_get_stale_trial_ids` is the one private name `fail_stale_trials` calls on a storage.
@_forwarding((*_public_methods(BaseHeartbeat), "_get_stale_trial_ids"))
class SignalSafeHeartbeatStorage(SignalSafeStorage, BaseHeartbeat):
    """The wrapper of a storage with Optuna's heartbeat: seen as one by `fail_stale_trials`."""

    def heartbeat_interval(self) -> int | None:
        return self.get_heartbeat_interval()


def signal_safe(storage: BaseStorage) -> SignalSafeStorage:
    """The wrapper for this storage, after the caching Optuna puts in front of an RDB storage
    (`get_storage`, what `optuna.create_study` would do with the storage itself)."""
    if isinstance(storage, SignalSafeStorage):
        return storage
    cached = get_storage(storage)
    if isinstance(cached, BaseHeartbeat) and cached.get_heartbeat_interval() is not None:
        # The methods come from @_forwarding, which mypy does not follow.
        return SignalSafeHeartbeatStorage(cached)  # type: ignore[abstract]
    return SignalSafeStorage(cached)  # type: ignore[abstract]


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage of a study a caller built without `signal_safe` (tests, benchmarks): Optuna
    5 has no public accessor, so this is the tuner's one read of `Study._storage`."""
    return study._storage


def optuna_heartbeat_s(storage: BaseStorage) -> int | None:
    """Seconds between Optuna's own heartbeats when this storage has them (RDB, --heartbeat)."""
    return storage.heartbeat_interval() if isinstance(storage, SignalSafeStorage) else None


def trial_id(storage: BaseStorage, study: optuna.Study, number: int) -> int:
    """The storage's id of trial `number` of `study`, by the storage's public lookups."""
    study_id = storage.get_study_id_from_name(study.study_name)
    return storage.get_trial_id_from_study_id_trial_number(study_id, number)
