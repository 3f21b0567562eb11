"""`tuner bench`: options -> BenchConfig, a progress bar while it runs, a summary table, files."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tuner.bench.client import API_KEY_ENV
from tuner.bench.metrics import LATENCIES, STATISTICS
from tuner.bench.runner import BenchConfig, BenchResult, run_bench
from tuner.bench.trace_profile import TraceProfile, profile_trace
from tuner.bench.workload import WorkloadSpec
from tuner.errors import UserError


@dataclass
class BenchOptions:
    """What the command line gave; None means "not given" (the workload's default applies)."""

    url: str
    workload: dict[str, Any]
    concurrency: int | None
    request_rate: float | None
    arrival: str
    warmup_requests: int
    stages: int
    api: str
    api_key: str | None
    model: str | None
    request_timeout_s: float | None
    ignore_eos: bool
    slos: dict[str, float]
    output_json: Path | None
    output_details: Path | None


def bench_command(options: BenchOptions, console: Console | None = None) -> BenchResult:
    """Run the benchmark the options describe, show it, write the files; return the result."""
    console = console or Console()
    spec = WorkloadSpec.from_dict({k: v for k, v in options.workload.items() if v is not None})
    cfg = BenchConfig(
        url=options.url,
        workload=spec,
        concurrency=options.concurrency,
        request_rate=options.request_rate,
        arrival=options.arrival,
        warmup_requests=options.warmup_requests,
        stages=options.stages,
        api=options.api,
        api_key=options.api_key,
        model=options.model,
        request_timeout_s=options.request_timeout_s,
        ignore_eos=options.ignore_eos,
        slos=options.slos or None,
    )
    for path in (options.output_json, options.output_details):
        if path is not None and not path.parent.is_dir():
            raise UserError(f"cannot write {path}: folder {path.parent} does not exist")
    check_sglang_server(options.url, options.api_key)

    progress = Progress(
        TextColumn("[bold]bench[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        task = progress.add_task("bench", total=spec.num_requests, note="warming up")

        def on_progress(done: int, total: int) -> None:
            if done == 1 and cfg.stages > 1:
                progress.update(task, completed=done, note=f"stage 1/{cfg.stages}")
            elif done == 1:
                progress.update(task, completed=done, note="")
            else:
                progress.update(task, completed=done)

        def on_stage(stage: int, summary: dict[str, float | int]) -> bool:
            upcoming = f"stage {stage + 2}/{cfg.stages}  " if stage + 1 < cfg.stages else ""
            note = (
                f"{upcoming}so far {summary['output_throughput']:.1f} out tok/s, "
                f"median TPOT {summary['median_tpot_ms']:.1f} ms"
            )
            progress.update(task, note=note)
            return True

        result = run_bench(cfg, on_stage=on_stage, on_progress=on_progress)

    scale = (
        "" if result.time_scale == 1.0 else f" (simulator x{result.time_scale:g}, modelled time)"
    )
    stopped = (
        ""
        if result.stopped_at_stage is None
        else f", stopped after stage {result.stopped_at_stage + 1}"
    )
    console.print(f"[bold]{spec.kind}[/] workload on {cfg.url}{scale}{stopped}")
    if spec.kind == "trace":
        console.print(trace_line(profile_trace(spec.trace(), spec.block_size)))
    for table in summary_tables(result, cfg):
        console.print(table)
    errors = [r.error for r in result.records if r.error]
    if result.server_lost:
        console.print(f"[red]{result.server_lost}[/]")
    elif errors:
        console.print(f"[yellow]{len(errors)} request(s) failed; first: {errors[0]}[/]")
    if options.output_json is not None:
        options.output_json.write_text(json.dumps(result_json(result, cfg), indent=2) + "\n")
    if options.output_details is not None:
        with options.output_details.open("w") as handle:
            for record in result.records:
                handle.write(json.dumps(record.to_dict()) + "\n")
    return result


def trace_line(profile: TraceProfile) -> str:
    """One line saying what the replayed trace holds (trace seconds, before any speedup)."""
    parts = [f"{profile.format} trace: {profile.requests} requests"]
    if profile.duration_s is not None and profile.mean_rate_rps is not None:
        parts[0] += f" over {profile.duration_s:.1f} s"
        parts.append(
            f"{profile.mean_rate_rps:.2f} req/s mean, {profile.peak_rate_rps or 0:.2f} peak"
        )
    for name, lengths in (("input", profile.input_len), ("output", profile.output_len)):
        if lengths:
            parts.append(f"{name} p50/p90/p99 " + "/".join(f"{v:.0f}" for v in lengths.values()))
    if profile.block_reuse is not None:
        parts.append(f"block reuse {profile.block_reuse:.1%}")
    if profile.multi_turn_sessions:
        parts.append(f"{profile.multi_turn_sessions} of {profile.sessions} sessions multi-turn")
    return ", ".join(parts)


def check_sglang_server(url: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
    """Refuse, in one line, a server that answers HTTP but is not sglang (or the simulator):
    benchmarked, every request would fail and the table would be zeros over an HTML body.

    sglang answers /server_info (older releases /get_server_info) with a JSON object. A server
    that cannot be reached, refuses the key or is still loading is left to the benchmark's own
    probe, which says so."""
    if not url.startswith(("http://", "https://")):
        return  # the client's own check names the scheme
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    seen: list[str] = []
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, trust_env=False) as client:
        for path in ("/server_info", "/get_server_info"):
            try:
                response = client.get(path, timeout=timeout_s)
            except httpx.HTTPError:
                return
            status = response.status_code
            if status in (401, 403) or status >= 500:
                return
            kind = response.headers.get("content-type", "no content type").split(";")[0]
            if status == 200:
                try:
                    if isinstance(response.json(), dict):
                        return
                except ValueError:
                    pass
                seen.append(f"{path} answered {kind}, not sglang's JSON")
            else:
                seen.append(f"{path} answered HTTP {status} ({kind})")
    raise UserError(
        f"{url} does not look like an sglang server: {' and '.join(seen)}; give the address of "
        "a running sglang server (python -m sglang.launch_server) or of the simulator "
        "(python -m tuner.sim)"
    )


def result_json(result: BenchResult, cfg: BenchConfig) -> dict[str, Any]:
    """The summary with sglang's key names at the top level, then how it was run."""
    return {
        **result.summary,
        "url": cfg.url,
        "api": cfg.api,
        "workload": cfg.workload.to_dict(),
        "max_concurrency": cfg.effective_concurrency,
        "request_rate": cfg.request_rate,
        "arrival": cfg.arrival,
        "warmup_requests": cfg.warmup_requests,
        "slos": dict(cfg.slos or {}),
        "time_scale": result.time_scale,
        "stopped_at_stage": result.stopped_at_stage,
        "stages": result.stages,
    }


def summary_tables(result: BenchResult, cfg: BenchConfig) -> list[Table]:
    """Throughputs and counts, then the latency distributions (modelled units)."""
    s = result.summary
    totals = Table()
    totals.add_column("metric")
    totals.add_column("value", justify="right")
    rows = [
        ("requests completed / failed", f"{s['completed']} / {s['failed']}"),
        ("duration (s)", f"{s['duration']:.2f}"),
        ("input / output tokens", f"{s['total_input_tokens']} / {s['total_output_tokens']}"),
        ("request throughput (req/s)", f"{s['request_throughput']:.2f}"),
        ("input throughput (tok/s)", f"{s['input_throughput']:.1f}"),
        ("output throughput (tok/s)", f"{s['output_throughput']:.1f}"),
        ("total throughput (tok/s)", f"{s['total_throughput']:.1f}"),
        ("concurrency", f"{s['concurrency']:.2f}"),
        ("cache hit rate", f"{s['cache_hit_rate']:.1%}"),
    ]
    if "trace_block_reuse" in s:
        rows.append(("trace's block reuse", f"{s['trace_block_reuse']:.1%}"))
    if "p50_send_lag_ms" in s:
        lags = "/".join(f"{s[f'{stat}_send_lag_ms']:.1f}" for stat in ("p50", "p99", "max"))
        rows.append(("send lag p50/p99/max (ms)", lags))
    if s["accept_length"]:
        rows.append(("accept length", f"{s['accept_length']:.2f}"))
    if cfg.slos:
        rows.append(("goodput (req/s within SLOs)", f"{s['request_goodput']:.2f}"))
    for name, value in rows:
        totals.add_row(name, value)

    latencies = Table()
    latencies.add_column("latency (ms)")
    for stat in STATISTICS:
        latencies.add_column(stat, justify="right")
    labels = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e_latency": "E2E"}
    for metric in LATENCIES:
        latencies.add_row(
            labels[metric], *(f"{s[f'{stat}_{metric}_ms']:.1f}" for stat in STATISTICS)
        )
    return [totals, latencies]
