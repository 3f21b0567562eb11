"""Load a search-space YAML file (or a shipped space by name) into a validated `SearchSpace`.

File format (every key but `model_path`, `params` and `workload` is optional)::

    name: qwen3.6-27b-mtp-hicache          # default study name; letters, digits, . _ -
    engine: {name: sglang, version: "0.5.23"}        # sglang version whose flag names are used;
                                           # optional python: (interpreter that runs sglang)
                                           # and env: {KEY: VALUE} for the server
    model_path: Qwen/Qwen3.6-27B           # passed as --model-path
    fixed_flags: {enable_metrics: true}    # always passed; same value rules as build_server_args
    sim: {hardware: rtx-pro-6000-blackwell, model: qwen3.6-27b, time_scale: 50}
    params:                                # tuned; names are sglang flag names with underscores
      NAME: {choices: [v1, v2, ...]}       # categorical; null = flag not passed
      NAME: {low: L, high: H}              # int when L and H are ints, else float
      NAME: {low: L, high: H, step: S}     # stepped; `log: true` for a log scale (no step)
      NAME: {low: 1, high: 8, type: float} # force the number type
      NAME: {low: 1, high: concurrency}    # a bound relative to the workload: an expression
                                           # (+ - * / // %, min, max) of `concurrency`
                                           # (bench.concurrency), resolved at load time; see
                                           # tuner/space/relative.py (open loops: give
                                           # bench.concurrency or a number)
      NAME: {derive: "other + 1"}          # computed from other params: + - * / // %, min, max
      NAME: {..., when: {OTHER: value}}    # only sampled when param OTHER has that value, or one
                                           # of a list of values; all keys must hold
    workload: {kind: multi-turn, ...}      # kind: random | shared-prefix | multi-turn | jsonl
                                           # | trace (a trace file replayed: docs/traces.md);
                                           # keys as tuner.bench.workload.WorkloadSpec
    bench: {concurrency: 16, request_rate: null, arrival: poisson, warmup_requests: 2,
            stages: 4, api: generate, timeout_s: 600}
                                           # concurrency null = no cap; request_rate null =
                                           # closed loop; arrival: poisson | constant;
                                           # api: generate | completions | chat;
                                           # timeout_s: per request
    objectives: {throughput: output_throughput, latency: median_tpot_ms}
    slos: ["p99_ttft_ms <= 2000"]          # metric <= limit or metric >= limit

A param whose `when` is false, or names a param that is itself inactive, is neither sampled nor
passed. Params are sampled in file order, each moved after any param its `when` or `derive`
names (a cycle is an error), so one pass decides every value. Errors are UserErrors naming the
file, the key path, the value and what is allowed, because a user edits these files by hand:
values of well-known flags are range-checked (tuner/space/flag_ranges.py), and a YAML syntax
error is reported where an unclosed '{', '[' or quote was opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from tuner.errors import UserError
from tuner.space.checks import check_space
from tuner.space.model import SearchSpace
from tuner.space.schema import SpaceError, SpaceFile, pydantic_message

DEFAULT_SPACE_NAME = "qwen3.6-27b-mtp-hicache"


def default_space_path() -> Path:
    """The seed scenario's space, found beside the package (repository checkout or editable
    install) or, failing that, under the current directory."""
    return _spaces_dir() / f"{DEFAULT_SPACE_NAME}.yaml"


def shipped_spaces() -> list[str]:
    """Names of the spaces shipped in search_spaces/, for help texts and errors."""
    return sorted(p.stem for p in _spaces_dir().glob("*.yaml"))


@dataclass(frozen=True)
class SpaceSource:
    """A search-space file read and parsed once: its YAML data, its name for errors, its stem."""

    data: object
    source: str
    default_name: str

    def build(self, **overrides: object) -> SearchSpace:
        """Validate the file's data (with top-level keys replaced, e.g. `capacity=25`)."""
        data = self.data
        if overrides and isinstance(data, Mapping):
            data = {**data, **overrides}
        return build_space(data, self.source, self.default_name)


def read_space_file(path: str | Path) -> SpaceSource:
    """Read and parse a search-space YAML file, not validated yet. A bare shipped name such as
    `qwen3.6-27b-mtp-hicache` is accepted too."""
    file = _resolve(Path(path))
    source = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read search space {source}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(_yaml_message(source, text, exc)) from None
    return SpaceSource(data, source, file.stem)


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a search-space YAML file (or a shipped space by name)."""
    return read_space_file(path).build()


def space_from_dict(
    data: object, source: str = "<search space>", default_name: str = "study"
) -> SearchSpace:
    """Validate an already-parsed mapping (e.g. a study's stored space); `source` names it in
    error messages."""
    return build_space(data, source, default_name)


def _spaces_dir() -> Path:
    # tuner/space/load.py -> the directory that holds the tuner package
    beside_package = Path(__file__).resolve().parents[2] / "search_spaces"
    if beside_package.is_dir():
        return beside_package
    return Path.cwd() / "search_spaces"


def _resolve(path: Path) -> Path:
    if path.exists() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path
    shipped = _spaces_dir() / f"{path.name}.yaml"
    if shipped.exists():
        return shipped
    known = ", ".join(shipped_spaces()) or "none"
    raise UserError(f"search space {path} not found: give a YAML file or one of: {known}")


def _yaml_message(source: str, text: str, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return f"{source}: invalid YAML: {problem}"
    lines = text.splitlines()

    def quoted(line: int) -> str:
        return repr(lines[line].strip()) if 0 <= line < len(lines) else "end of file"

    # PyYAML reports where it noticed: an unclosed '{', '[' or quote is noticed lines later,
    # at the next thing that cannot belong inside it. Point at where it was opened instead.
    opened = getattr(exc, "context_mark", None)
    context = getattr(exc, "context", None) or ""
    what = next((w for k, w in _OPENERS.items() if k in context), None)
    if opened is not None and what is not None and opened.line != mark.line:
        return (
            f"{source}:{opened.line + 1}:{opened.column + 1}: invalid YAML: the {what} opened "
            f"here ({quoted(opened.line)}) is not closed before line {mark.line + 1} "
            f"({quoted(mark.line)}: {problem})"
        )
    return (
        f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {problem} "
        f"({quoted(mark.line)}; fix the syntax at that line and column)"
    )


_OPENERS = {
    "flow mapping": "'{'",
    "flow sequence": "'['",
    "quoted scalar": "quote",
}


def build_space(data: object, source: str, default_name: str) -> SearchSpace:
    if not isinstance(data, Mapping):
        raise UserError(
            f"{source}: the file must be a YAML mapping with at least model_path, params and "
            f"workload (got {type(data).__name__})"
        )
    try:
        raw = SpaceFile.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{source}: {pydantic_message(exc)}") from None
    try:
        return check_space(raw, default_name)
    except SpaceError as exc:
        raise UserError(f"{source}: {exc}") from None
