"""The `tuner` command line: parse options, call one function per command, print.

Each command lives in the module that owns the work; this file only wires them together.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer

from tuner.errors import UserError
from tuner.init.command import init_command

app = typer.Typer(
    name="tuner",
    help="Auto-tune SGLang launch parameters with Optuna (real sglang, or a simulated server).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def main() -> None:
    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


@app.callback()
def _root() -> None:
    """Auto-tune SGLang launch parameters with Optuna (real sglang, or a simulated server)."""


# Commands register themselves below; keep each block a thin call into its module.


app.command("init")(init_command)  # tuner/init/command.py


@app.command()
def version() -> None:
    """Print the tuner's version."""
    from tuner import __version__

    typer.echo(__version__)


@app.command()
def optimize(
    trials: int = typer.Option(
        40, "--trials", "-n", min=1, help="Finished trials the study should hold."
    ),
    space: Path | None = typer.Option(
        None, "--space", help="Search-space YAML (default: the seed scenario)."
    ),
    study: str | None = typer.Option(
        None, "--study", help="Study name (default: the space's name)."
    ),
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="sglang (real) or sim (the simulated server); default: the space's engine.server.",
    ),
    engine_python: str | None = typer.Option(
        None,
        "--engine-python",
        help="--engine sglang: the Python that runs sglang (default: the space's, else this one).",
    ),
    engine_env: list[str] = typer.Option(
        [],
        "--engine-env",
        help="--engine sglang: KEY=VALUE for the server's environment (repeatable).",
    ),
    storage: str | None = typer.Option(
        None, "--storage", help="Optuna storage URL or journal file (default: studies/<study>.db)."
    ),
    timeout: float | None = typer.Option(
        None, "--timeout", help="Stop starting new trials after this many seconds."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Sampler seed."),
    sampler: str = typer.Option("tpe", "--sampler", help="tpe, nsga2, random, grid or gp."),
    prune: bool = typer.Option(
        True, "--prune/--no-prune", help="Stop clearly dominated trials between benchmark stages."
    ),
    feasibility: bool = typer.Option(
        True,
        "--feasibility/--no-feasibility",
        help="Skip configurations predicted not to fit or to crash.",
    ),
    guide: bool = typer.Option(
        True, "--guide/--no-guide", help="Estimate-picked first trials; late best's neighbours."
    ),
    gpus: str | None = typer.Option(
        None, "--gpus", help="CUDA_VISIBLE_DEVICES for the server, e.g. 0,1."
    ),
    gpu_memory_gb: float | None = typer.Option(
        None,
        "--gpu-memory-gb",
        help="GPU memory for the memory estimate when nvidia-ml-py is absent.",
    ),
    time_scale: float | None = typer.Option(
        None, "--time-scale", help="Simulator only: run K times faster than real time."
    ),
    studies_dir: Path = typer.Option(
        Path("studies"), "--studies-dir", help="Where studies and trial logs live."
    ),
    report: bool = typer.Option(
        True, "--report/--no-report", help="Write the HTML report at the end."
    ),
    workers: int = typer.Option(
        1, "--workers", min=1, help="Trials at once on this machine (with --gpus: one per group)."
    ),
    tp_size: int = typer.Option(
        1, "--tp-size", min=1, help="GPUs per server; --gpus is split into groups of this size."
    ),
    heartbeat: int = typer.Option(
        10,
        "--heartbeat",
        min=1,
        help="Seconds between a running trial's heartbeats; a trial silent for 3 is retried.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the cost and the first configurations; launch nothing."
    ),
    goal: str | None = typer.Option(
        None,
        "--goal",
        help="throughput, latency, balanced or capacity: objectives and SLOs (the space's own "
        "win), the export pick, what the stop rule watches.",
    ),
    min_gain: float | None = typer.Option(
        None,
        "--min-gain",
        help="Stop before --trials when the rest is unlikely to move the front by more than "
        "this share (default 0.02 = 2%); 0 runs every trial.",
    ),
) -> None:
    """Run (or resume) a study: sample launch flags, launch, benchmark, prune, record."""
    from tuner.optimize.command import run_optimize
    from tuner.study.options import StudyOptions, parse_engine_env
    from tuner.study.stopping import DEFAULT_MIN_GAIN

    options = StudyOptions(
        trials=trials,
        space_path=space,
        study_name=study,
        storage=storage,
        engine=engine,
        engine_python=engine_python,
        engine_env=parse_engine_env(engine_env),
        timeout_s=timeout,
        seed=seed,
        sampler=sampler,
        prune=prune,
        feasibility=feasibility,
        warm_start=guide,
        polish=guide,
        studies_dir=studies_dir,
        gpus=gpus,
        gpu_memory_gb=gpu_memory_gb,
        time_scale=time_scale,
        tp_size=tp_size,
        heartbeat_s=heartbeat,
        min_gain=DEFAULT_MIN_GAIN if min_gain is None else min_gain,
        goal=goal,
    )
    code = run_optimize(options, workers=workers, report=report, dry_run=dry_run)
    if code:
        raise typer.Exit(code)


@app.command("doctor")
def doctor_command(
    engine_python: str | None = typer.Option(
        None,
        "--engine-python",
        help="The Python that runs sglang (default: the space's, else this one).",
    ),
    space: Path | None = typer.Option(
        None, "--space", help="Search-space YAML: its model, HiCache range, device and env."
    ),
    port: int | None = typer.Option(
        None, "--port", min=1, max=65535, help="Port the server will use (default: 30000)."
    ),
    gpus: str | None = typer.Option(
        None, "--gpus", help="The server's GPUs, e.g. 0,1 (default: CUDA_VISIBLE_DEVICES, all)."
    ),
    engine_env: list[str] = typer.Option(
        [], "--engine-env", help="KEY=VALUE for the server's environment (repeatable)."
    ),
    studies_dir: Path = typer.Option(
        Path("studies"), "--studies-dir", help="Where studies and trial logs will live."
    ),
) -> None:
    """Check this host for real sglang: engine, flags, model, GPUs, RAM, ports, disk."""
    from tuner.doctor import DoctorSetting
    from tuner.doctor.command import doctor
    from tuner.study.options import parse_engine_env

    setting = DoctorSetting.resolve(
        engine_python=engine_python,
        space_path=space,
        port=port,
        studies_dir=studies_dir,
        gpus=gpus,
        engine_env=parse_engine_env(engine_env),
    )
    code = doctor(setting, typer.echo, lambda line: typer.echo(line, err=True))
    if code:
        raise typer.Exit(code)


@app.command()
def bench(
    url: str = typer.Option("http://127.0.0.1:30000", "--url", help="Server to benchmark."),
    workload: str = typer.Option(
        "random",
        "--workload",
        help="random, shared-prefix, multi-turn, jsonl or trace (a trace file: docs/traces.md).",
    ),
    requests: int | None = typer.Option(
        None, "--requests", help="random / jsonl: requests to send (random: 200)."
    ),
    input_len: int | None = typer.Option(None, "--input-len", help="random: prompt tokens (1024)."),
    output_len: int | None = typer.Option(
        None,
        "--output-len",
        help="random / shared-prefix / jsonl / unanswered text trace turns: output tokens (256).",
    ),
    range_ratio: float | None = typer.Option(
        None, "--range-ratio", help="random: lengths drawn from len x ratio to len (1.0)."
    ),
    groups: int | None = typer.Option(None, "--groups", help="shared-prefix: groups (8)."),
    prompts_per_group: int | None = typer.Option(
        None, "--prompts-per-group", help="shared-prefix: prompts per group (16)."
    ),
    system_prompt_len: int | None = typer.Option(
        None, "--system-prompt-len", help="shared-prefix / multi-turn: system prompt tokens (2048)."
    ),
    question_len: int | None = typer.Option(
        None, "--question-len", help="shared-prefix: question tokens (128)."
    ),
    conversations: int | None = typer.Option(
        None, "--conversations", help="multi-turn: conversations (16)."
    ),
    turns: int | None = typer.Option(None, "--turns", help="multi-turn: turns each (4)."),
    user_len: int | None = typer.Option(
        None, "--user-len", help="multi-turn: user turn tokens (256)."
    ),
    answer_len: int | None = typer.Option(
        None, "--answer-len", help="multi-turn: answer tokens (256)."
    ),
    file: str | None = typer.Option(
        None, "--file", help="jsonl: the request file; trace: the trace file."
    ),
    trace_format: str | None = typer.Option(
        None,
        "--trace-format",
        help="trace: auto (detected), mooncake, azure, burstgpt, sharegpt or openai-chat.",
    ),
    mode: str | None = typer.Option(
        None,
        "--mode",
        help="trace: open-loop (at the trace's times; the default when it has them) or "
        "closed-loop (its requests in order by --concurrency clients).",
    ),
    speedup: float | None = typer.Option(
        None, "--speedup", help="trace, open loop: the trace's times divided by this (1.0)."
    ),
    start: float | None = typer.Option(
        None, "--start", help="trace: replay from this many trace seconds after its first request."
    ),
    duration: float | None = typer.Option(
        None, "--duration", help="trace: replay this many trace seconds from --start."
    ),
    max_requests: int | None = typer.Option(
        None, "--max-requests", help="trace: replay at most this many of its requests."
    ),
    block_size: int | None = typer.Option(
        None, "--block-size", help="trace: tokens per Mooncake hash id (512)."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Workload and arrival seed (0)."),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        help="Most requests in flight (default: no cap); a closed-loop trace's clients.",
    ),
    request_rate: float | None = typer.Option(
        None, "--request-rate", help="Requests per second (default: as fast as allowed)."
    ),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson or constant."),
    warmup_requests: int = typer.Option(1, "--warmup-requests", help="Not counted."),
    stages: int = typer.Option(1, "--stages", help="Stages, by requests completed."),
    api: str = typer.Option("generate", "--api", help="generate, completions or chat."),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="SGLANG_API_KEY",
        show_default=False,
        help="Sent as a Bearer token; prefer the environment variable to the command line.",
    ),
    model: str | None = typer.Option(
        None, "--model", help="OpenAI APIs: model name (default: from /server_info)."
    ),
    request_timeout: float | None = typer.Option(
        1800.0, "--request-timeout", help="Seconds before a request counts as timed out."
    ),
    ignore_eos: bool = typer.Option(
        True, "--ignore-eos/--no-ignore-eos", help="Generate exactly the output length."
    ),
    slo_ttft_ms: float | None = typer.Option(None, "--slo-ttft-ms", help="Goodput: TTFT limit."),
    slo_tpot_ms: float | None = typer.Option(None, "--slo-tpot-ms", help="Goodput: TPOT limit."),
    slo_e2e_ms: float | None = typer.Option(
        None, "--slo-e2e-ms", help="Goodput: E2E latency limit."
    ),
    output_json: Path | None = typer.Option(
        None, "--output-json", help="Write the summary (sglang's key names) here."
    ),
    output_details: Path | None = typer.Option(
        None, "--output-details", help="Write one JSON line per request here."
    ),
) -> None:
    """Benchmark a running sglang server or simulator; print a summary table."""
    from tuner.bench.command import BenchOptions, bench_command

    slos = {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "e2e_latency_ms": slo_e2e_ms}
    result = bench_command(
        BenchOptions(
            url=url,
            workload={
                "kind": workload,
                "seed": seed,
                "requests": requests,
                "input_len": input_len,
                "output_len": output_len,
                "range_ratio": range_ratio,
                "groups": groups,
                "prompts_per_group": prompts_per_group,
                "system_prompt_len": system_prompt_len,
                "question_len": question_len,
                "conversations": conversations,
                "turns": turns,
                "user_len": user_len,
                "answer_len": answer_len,
                "file": file,
                "format": trace_format,
                "mode": mode,
                "speedup": speedup,
                "start": start,
                "duration": duration,
                "max_requests": max_requests,
                "block_size": block_size,
            },
            concurrency=concurrency,
            request_rate=request_rate,
            arrival=arrival,
            warmup_requests=warmup_requests,
            stages=stages,
            api=api,
            api_key=api_key,
            model=model,
            request_timeout_s=request_timeout,
            ignore_eos=ignore_eos,
            slos={k: v for k, v in slos.items() if v is not None},
            output_json=output_json,
            output_details=output_details,
        )
    )
    if result.summary["completed"] == 0:
        typer.echo("error: no request completed", err=True)
        raise typer.Exit(1)


# -- reading a study: report, export, dashboard, studies (tuner/results/) --

_STUDY_HELP = "Study name (default: the only or most recently written study in --studies-dir)."
_STORAGE_HELP = "Optuna storage URL, journal file or SQLite file (default: studies/<study>.db)."
_STUDIES_DIR_HELP = "Where studies live."


@app.command("report")
def report_command(
    study: str | None = typer.Option(None, "--study", help=_STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=_STORAGE_HELP),
    out: Path | None = typer.Option(
        None, "--out", help="HTML file to write (default: studies/<study>/report.html)."
    ),
    png: bool = typer.Option(
        False, "--png", help="Also write pareto.png beside it (kaleido and Chromium)."
    ),
    studies_dir: Path = typer.Option(Path("studies"), "--studies-dir", help=_STUDIES_DIR_HELP),
) -> None:
    """Write the study's offline HTML report: Pareto front, history, importance, verdict."""
    from tuner.results.report import PNG_FILE, write_report
    from tuner.results.storage import locate_study

    location, note = locate_study(storage, study, studies_dir)
    if note:
        typer.echo(note, err=True)
    path = write_report(location.storage, location.study_name, out, png, studies_dir=studies_dir)
    typer.echo(f"report: {path}")
    if png:
        typer.echo(f"pareto: {path.parent / PNG_FILE}")


@app.command("export")
def export_command(
    study: str | None = typer.Option(None, "--study", help=_STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=_STORAGE_HELP),
    trial: int | None = typer.Option(None, "--trial", help="Export this trial number."),
    pick: str | None = typer.Option(
        None,
        "--pick",
        help="max-throughput, min-latency or knee (default: the study's --goal's, else knee).",
    ),
    slo: list[str] | None = typer.Option(
        None,
        "--slo",
        help="Limit on candidates, repeatable; replaces the study's SLOs for this pick: "
        "--slo 'p99_ttft_ms<=5000'.",
    ),
    out_dir: Path = typer.Option(Path("."), "--out-dir", help="Where to write the files."),
    studies_dir: Path = typer.Option(Path("studies"), "--studies-dir", help=_STUDIES_DIR_HELP),
) -> None:
    """Write launch_<study>_trial<N>.sh, .yaml (sglang --config), .docker.sh and .k8s.yaml."""

    from tuner.results.export import export_trial
    from tuner.results.pick import NoCandidate, Pick, export_prefix
    from tuner.results.storage import locate_study

    if pick is not None and pick not in {p.value for p in Pick}:
        fail(f"--pick {pick!r}: choose one of {', '.join(p.value for p in Pick)}")
    location, note = locate_study(storage, study, studies_dir)
    if note:
        typer.echo(note, err=True)
    try:
        result = export_trial(
            location.storage,
            location.study_name,
            trial=trial,
            pick=pick,
            slos=slo or (),
            out_dir=out_dir,
        )
    except NoCandidate as exc:  # say it with the options that found this study
        fail(exc.command(export_prefix(location.study_name, storage, studies_dir)))
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    how = "--trial" if result.picked_by == "trial" else f"--pick {result.picked_by}"
    typer.echo(f"trial {result.trial_number} of {result.study_name} ({how})")
    typer.echo(f"script: {result.script}")
    typer.echo(f"config: {result.config}")
    typer.echo(f"docker: {result.docker}")
    typer.echo(f"kubernetes: {result.kubernetes}")
    runnable = result.script if result.script.parent != Path() else f"./{result.script}"
    typer.echo(f"run it: SGLANG_PORT=30000 {runnable}  (also SGLANG_HOST, SGLANG_API_KEY)")


@app.command("dashboard")
def dashboard_command(
    study: str | None = typer.Option(None, "--study", help=_STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=_STORAGE_HELP),
    port: int = typer.Option(8080, "--port", help="Port on 127.0.0.1."),
    studies_dir: Path = typer.Option(Path("studies"), "--studies-dir", help=_STUDIES_DIR_HELP),
) -> None:
    """Serve optuna-dashboard on the study's storage (127.0.0.1 only) until Ctrl-C."""
    from tuner.results.dashboard import dashboard_command as serve

    serve(storage, study, port, studies_dir)


@app.command("studies")
def studies_command(
    storage: str | None = typer.Option(
        None, "--storage", help="List this storage instead of the files in --studies-dir."
    ),
    studies_dir: Path = typer.Option(Path("studies"), "--studies-dir", help=_STUDIES_DIR_HELP),
) -> None:
    """List studies with trial counts by state and their best points within the SLOs."""
    from tuner.results.catalog import format_listing, list_studies

    typer.echo(format_listing(list_studies(storage, studies_dir)))


@app.command("explain")
def explain_command(
    trial: int = typer.Option(..., "--trial", help="The trial number to explain."),
    study: str | None = typer.Option(None, "--study", help=_STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=_STORAGE_HELP),
    studies_dir: Path = typer.Option(Path("studies"), "--studies-dir", help=_STUDIES_DIR_HELP),
) -> None:
    """Say in one sentence why the search launched a trial: the rule and the trial it moved from."""
    from tuner.optimize.explain import explain_trial
    from tuner.results.storage import locate_study

    location, note = locate_study(storage, study, studies_dir)
    if note:
        typer.echo(note, err=True)
    typer.echo(explain_trial(location.storage, location.study_name, trial))


if __name__ == "__main__":
    main()
