"""The live display of `tuner optimize`: one rich panel fed by the objective's events."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tuner.results import record
from tuner.results.goals import Slo, capacity_words, is_capacity

_NOT_LAUNCHED = (record.OUTCOME_SKIPPED, record.OUTCOME_INVALID)


def format_flags(flags: dict[str, Any]) -> str:
    """Tuned flags on one line: switches bare, floats short, unset ones left out."""
    parts = []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            parts.append(key)
        else:
            parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts) or "sglang defaults"


def rate_step_words(step: dict[str, Any]) -> str:
    """One rate step of a capacity search (tuner/trial/capacity.py) as the display shows it."""
    metrics = step.get("metrics") or {}
    ttft = metrics.get("p99_ttft_ms")
    seen = f" (p99 TTFT {ttft:.0f} ms)" if isinstance(ttft, int | float) else ""
    if step.get("met"):
        verdict = "met every SLO"
    elif step.get("stopped_early"):
        verdict = (
            f"broke {step.get('broke')}, stopped after {step.get('completed')} of "
            f"{step.get('requests')} requests"
        )
    else:
        verdict = f"broke {step.get('broke')}"
    return (
        f"rate step {int(step.get('step', 0)) + 1}: {step.get('rate', 0):.3g} req/s {verdict}{seen}"
    )


class OptimizeDisplay:
    """Receives (kind, data) events and keeps a live panel up to date."""

    def __init__(
        self,
        console: Console,
        total: int,
        throughput: str,
        latency: str,
        slos: tuple[Slo, ...] = (),
        engine: str | None = None,
    ) -> None:
        self.console = console
        self.engine = engine  # what serves the trials, the panel's first line
        self.total = total
        self.throughput_name = throughput
        self.latency_name = latency
        self.slos = slos  # a capacity study says its rates with them
        self.started = time.monotonic()
        self.done_at_start = 0
        self.finished = 0
        self.counts = {"completed": 0, "pruned": 0, "failed": 0, "skipped": 0, "repeated": 0}
        self.current: dict[int, dict[str, str]] = {}  # running trials, by number
        self.best: list[tuple[float, float, int]] = []
        self.live: Live | None = None
        self.stopped: str | None = None  # the stop rule ended the study (tuner/study/stopping.py)

    def __enter__(self) -> OptimizeDisplay:
        self.live = Live(self.render(), console=self.console, refresh_per_second=4, transient=True)
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def _label(self, data: dict[str, Any]) -> str:
        """`trial 7 (polish:move)`: the trial and the rule that proposed it, when known."""
        rule = self.current.get(data["number"], {}).get("rule")
        return f"trial {data['number']}" + (f" ({rule})" if rule else "")

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            self.done_at_start = int(data.get("done", 0))
            self.finished = self.done_at_start
        elif kind == "sampled":
            self.current[data["number"]] = {
                "flags": "sglang defaults"
                if data.get("is_default")
                else format_flags(data["flags"]),
                "status": "checking",
                # The rule that proposed it (tuner/study/policy.py), shown beside its flags.
                "rule": data.get("guided_by") or "",
            }
        elif kind == "launching":
            self._status(data, "launching server")
        elif kind == "ready":
            cap = data.get("capacity", {})
            self._status(
                data,
                f"benchmarking (max_running_requests={cap.get('max_running_requests', '?')})",
            )
        elif kind == "stage":
            self._status(
                data,
                f"stage {data['stage'] + 1}/{data['n_stages']}: "
                f"{data['throughput']:.1f} tok/s, {data['latency']:.1f} ms",
            )
        elif kind == "rate_step":
            self._status(data, rate_step_words(data))
        elif kind in ("waiting", "gave_up", "stop_check"):
            self._log(data["message"])
        elif kind == "stopped":
            self.stopped = data["message"]
            self._log(data["message"])
        elif kind == "recovered":
            retry = data.get("retry")
            self._log(
                f"trial {data['number']} (worker {data['worker']}) was abandoned: "
                f"{data['reason']}; "
                + (f"queued again as trial {retry}" if retry is not None else "retried enough")
            )
        elif kind == "worker_died":
            self._log(
                f"worker {data['worker']} died (exit {data['exitcode']}); "
                f"queued again: {data.get('retried') or 'nothing'}"
            )
        elif kind in ("completed", "pruned", "failed"):
            # --trials counts launched configurations (tuner/study/budget.py): a skip or a
            # repeat of a measured configuration is shown but does not advance the count.
            free = data.get("duplicate") or data.get("outcome") in _NOT_LAUNCHED
            if not free:
                self.finished += 1
            if data.get("duplicate"):
                self.counts["repeated"] += 1
                self._log(f"{self._label(data)}: {data.get('message', 'repeated')}")
            elif kind == "completed":
                self.counts["completed"] += 1
                if data.get("feasible", True):
                    self.best.append((data["throughput"], data["latency"], data["number"]))
                self._log(
                    f"{self._label(data)}: {self._measured(data)}"
                    + ("" if data.get("feasible", True) else " (violates an SLO)")
                )
            elif kind == "pruned":
                self.counts["pruned"] += 1
                self._log(f"{self._label(data)}: pruned at stage {data['stage'] + 1}")
            else:
                key = "skipped" if data.get("outcome") in _NOT_LAUNCHED else "failed"
                self.counts[key] += 1
                self._log(f"{self._label(data)}: {data.get('outcome')}: {data.get('message')}")
            self.current.pop(data["number"], None)
        if self.live is not None:
            self.live.update(self.render())

    def _measured(self, data: dict[str, Any]) -> str:
        if is_capacity(self.throughput_name):
            return (
                f"{capacity_words(data['throughput'], self.slos)}; "
                f"{data['latency']:.1f} ms {self.latency_name} there"
            )
        return f"{data['throughput']:.1f} tok/s, {data['latency']:.1f} ms"

    def _status(self, data: dict[str, Any], status: str) -> None:
        trial = self.current.setdefault(data["number"], {"flags": "", "status": ""})
        trial["status"] = status

    def _log(self, line: str) -> None:
        self.console.print(Text(line, style="dim"))

    def render(self) -> Group:
        elapsed = time.monotonic() - self.started
        ran = self.finished - self.done_at_start
        left = max(self.total - self.finished, 0)
        eta = f"{elapsed / ran * left:.0f}s" if ran else "?"
        head = Text.assemble(
            ("trial ", "bold"),
            (f"{min(self.finished + 1, self.total)}/{self.total}", "bold cyan"),
            f"  completed {self.counts['completed']}  pruned {self.counts['pruned']}"
            f"  failed {self.counts['failed']}  skipped {self.counts['skipped']}"
            f"  repeated {self.counts['repeated']}"
            f"  elapsed {elapsed:.0f}s  remaining ~{eta}",
        )
        parts: list[Any] = [Text(f"engine: {self.engine}")] if self.engine else []
        parts.append(head)
        if self.stopped:
            parts.append(Text(self.stopped, style="green"))
        for number, trial in sorted(self.current.items()):
            rule = f" [{trial['rule']}]" if trial.get("rule") else ""
            parts.append(Text(f"#{number}{rule} {trial['flags']}"))
            parts.append(Text(f"  {trial['status']}", style="yellow"))
        if self.best:
            table = Table(title="best so far", box=None, show_header=True)
            table.add_column("trial")
            table.add_column(self.throughput_name, justify="right")
            table.add_column(self.latency_name, justify="right")
            for thr, lat, number in sorted(self.best, key=lambda b: -b[0])[:3]:
                table.add_row(str(number), f"{thr:.1f}", f"{lat:.1f}")
            parts.append(table)
        return Group(*parts)
