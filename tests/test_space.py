"""Search-space loading, validation messages and conditional suggestion."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tuner.errors import UserError
from tuner.space.load import default_space_path, load_space, shipped_spaces, space_from_dict
from tuner.space.model import Slo, suggest_flags

# Params must be real sglang flags (the space is checked against the parser snapshot), so the
# tests use a few with simple types: a categorical, two ints and a float.
MINIMAL: dict[str, Any] = {
    "model_path": "org/model",
    "params": {"schedule_policy": {"choices": ["fcfs", "lpm"]}},
    "workload": {"kind": "random"},
}


def write(tmp_path: Path, data: object, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def error_for(tmp_path: Path, data: object) -> str:
    path = write(tmp_path, data)
    with pytest.raises(UserError) as info:
        load_space(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    return message


def with_params(**params: Any) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    data["params"].update(params)
    return data


# --------------------------------------------------------------------------- shipped spaces


def test_default_space_is_the_seed_scenario():
    path = default_space_path()
    assert path.name == "qwen3.6-27b-mtp-hicache.yaml" and path.exists()
    space = load_space(path)
    assert space.name == "qwen3.6-27b-mtp-hicache"
    assert space.engine_version == "0.5.23"
    assert space.model_path == "Qwen/Qwen3.6-27B"
    assert space.fixed_flags == {"enable_metrics": True}
    assert space.sim["hardware"] == "rtx-pro-6000-blackwell"
    assert space.workload["kind"] == "multi-turn"
    p = space.params
    assert p["speculative_algorithm"].choices == (None, "NEXTN")
    assert (p["speculative_num_steps"].low, p["speculative_num_steps"].high) == (1, 5)
    assert (p["mem_fraction_static"].low, p["mem_fraction_static"].high) == (0.70, 0.95)
    assert p["hicache_ratio"].when == {"enable_hierarchical_cache": (True,)}
    assert p["hicache_write_policy"].when == {"enable_hierarchical_cache": (True,)}
    assert p["mamba_radix_cache_strategy"].choices == ("no_buffer", "extra_buffer")
    mrr = p["max_running_requests"]
    # Bounded by the benchmark's 16 clients (tuner/space/relative.py).
    assert (mrr.kind, mrr.low, mrr.high, mrr.log) == ("int", 1, 16, True)
    assert mrr.relative == {"high": "concurrency"}
    assert p["chunked_prefill_size"].kind == "categorical"
    assert space.objectives.metrics == ["output_throughput", "median_tpot_ms"]
    assert space.objectives.directions == ["maximize", "minimize"]
    assert space.slos == [Slo(metric="p99_ttft_ms", op="<=", limit=3000)]


@pytest.mark.parametrize("name", ["qwen3.6-27b-mtp-hicache", "qwen3-8b-h200"])
def test_shipped_spaces_load_by_name_and_round_trip(name: str):
    assert name in shipped_spaces()
    space = load_space(name)
    again = space_from_dict(space.to_dict())
    assert again == space
    # to_dict is what the study stores: it must survive JSON and YAML.
    assert space_from_dict(yaml.safe_load(yaml.safe_dump(space.to_dict()))) == space


def test_defaults_fill_optional_sections(tmp_path: Path):
    space = load_space(write(tmp_path, MINIMAL, "my-space.yaml"))
    assert space.name == "my-space"
    assert space.engine_version == "0.5.23"
    assert space.bench.concurrency == 16 and space.bench.stages == 4
    assert space.bench.request_rate is None and space.bench.api == "generate"
    assert space.objectives.latency == "median_tpot_ms"
    assert space.slos == [] and space.sim == {} and space.fixed_flags == {}


def test_slo_violation_is_graded_relative_to_the_limit():
    upper = Slo(metric="p99_ttft_ms", op="<=", limit=2000)
    assert upper.violation(3000) == pytest.approx(0.5)
    assert upper.violation(1000) == pytest.approx(-0.5)
    lower = Slo(metric="output_throughput", op=">=", limit=100)
    assert lower.violation(50) == pytest.approx(0.5)
    assert lower.violation(150) < 0
    assert str(upper) == "p99_ttft_ms <= 2000"


def test_slos_accept_the_mapping_form(tmp_path: Path):
    data = dict(MINIMAL, slos=[{"metric": "p95_itl_ms", "op": "<=", "limit": 50}, "p99_ttft_ms<=9"])
    space = load_space(write(tmp_path, data))
    assert [(s.metric, s.op, s.limit) for s in space.slos] == [
        ("p95_itl_ms", "<=", 50.0),
        ("p99_ttft_ms", "<=", 9.0),
    ]


# --------------------------------------------------------------------------- error messages


def test_yaml_syntax_error_names_file_line_and_column(tmp_path: Path):
    text = "model_path: m\nparams:\n  a: {choices: [x, y]\nworkload: {kind: random}\n"
    message = error_for(tmp_path, text)
    # PyYAML notices at line 4; the '{' left open is on line 3, column 6.
    assert ":3:6: invalid YAML: the '{' opened here ('a: {choices: [x, y]')" in message
    assert "is not closed before line 4 ('workload: {kind: random}'" in message
    bad_key = error_for(tmp_path, "model_path: m\n  params: 3\n")
    assert ":2:9: invalid YAML: mapping values are not allowed here ('params: 3';" in bad_key


def test_missing_file_is_a_user_error(tmp_path: Path):
    with pytest.raises(UserError, match="cannot read search space"):
        load_space(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match=r"qwen3\.6-27b-mtp-hicache"):
        load_space("no-such-space")


def test_unknown_top_level_key_lists_allowed_keys(tmp_path: Path):
    message = error_for(tmp_path, dict(MINIMAL, objective={"latency": "x"}))
    assert "objective: unknown key" in message and "objectives" in message


def test_unknown_param_key_names_the_path(tmp_path: Path):
    message = error_for(tmp_path, with_params(page_size={"low": 1, "hihg": 2}))
    assert "params.page_size.hihg: unknown key" in message
    assert "low, high, step, log, type, derive, when" in message


def test_bad_range_names_key_value_and_rule(tmp_path: Path):
    data = with_params(mem_fraction_static={"low": 0.99, "high": 0.95})
    message = error_for(tmp_path, data)
    assert "params.mem_fraction_static.low: 0.99 is above high (0.95)" in message


def test_wrong_type_names_value_and_expected_type(tmp_path: Path):
    message = error_for(tmp_path, with_params(page_size={"low": "abc", "high": 2}))
    # A string is a bound relative to the workload (tuner/space/relative.py).
    assert "params.page_size.low: 'abc' is not a number" in message
    assert "may name only concurrency" in message
    message = error_for(tmp_path, with_params(page_size={"low": True, "high": 2}))
    assert "params.page_size.low = True: must be a number" in message


def test_condition_naming_unknown_param(tmp_path: Path):
    data = with_params(page_size={"low": 1, "high": 2, "when": {"zz": 1}})
    message = error_for(tmp_path, data)
    assert "params.page_size.when.zz: condition names 'zz', which is not a param" in message
    assert "(params: schedule_policy, page_size)" in message


def test_params_are_sampled_after_what_they_depend_on(tmp_path: Path):
    data = copy.deepcopy(MINIMAL)
    data["params"] = {
        "cuda_graph_max_bs_decode": {
            "derive": "max_running_requests + 1",
            "when": {"schedule_policy": "lpm"},
        },
        "max_running_requests": {"low": 1, "high": 2, "when": {"schedule_policy": "lpm"}},
        "schedule_policy": {"choices": ["lpm"]},
        "page_size": {"choices": [1]},
    }
    space = load_space(write(tmp_path, data))
    assert list(space.params) == [
        "schedule_policy",
        "max_running_requests",
        "cuda_graph_max_bs_decode",
        "page_size",
    ]
    flags = suggest_flags(optuna.create_study().ask(), space)
    assert flags["cuda_graph_max_bs_decode"] == flags["max_running_requests"] + 1


def test_dependency_cycle_is_rejected(tmp_path: Path):
    data = copy.deepcopy(MINIMAL)
    data["params"] = {
        "page_size": {"choices": [1], "when": {"max_running_requests": 1}},
        "max_running_requests": {"choices": [1], "when": {"page_size": 1}},
    }
    assert (
        "params.page_size: conditions or derivations form a cycle: "
        "page_size -> max_running_requests -> page_size"
    ) in error_for(tmp_path, data)


def test_condition_value_outside_choices(tmp_path: Path):
    data = with_params(page_size={"low": 1, "high": 2, "when": {"schedule_policy": "lof"}})
    message = error_for(tmp_path, data)
    assert (
        "params.page_size.when.schedule_policy: 'lof' is not one of schedule_policy's choices "
        "['fcfs', 'lpm']"
    ) in message


@pytest.mark.parametrize(
    ("param", "expected"),
    [
        ({"low": 0, "high": 8, "log": True}, "params.page_size.low: 0 must be > 0 on a log scale"),
        (
            {"low": 1, "high": 8, "log": True, "step": 0.5},
            "params.page_size.step: a log-scale range",
        ),
        ({"low": 0.1, "high": 2, "step": 0.3}, "params.page_size.step: 0.3 does not divide"),
        ({"low": 1.5, "high": 4, "type": "int"}, "params.page_size.low: 1.5 is not a whole number"),
        ({"choices": []}, "params.page_size.choices: must list at least one value"),
        ({"choices": [1, 1]}, "params.page_size.choices: lists 1 twice"),
        ({"choices": [1], "step": 1}, "params.page_size.step: only applies to a low/high range"),
        (
            {"choices": [1], "low": 1},
            "params.page_size: give exactly one of choices, low/high or derive",
        ),
        ({"low": 1}, "params.page_size.high: a range needs both low and high"),
        ({"derive": "__import__('os')"}, "only min(...) and max(...) may be called"),
        ({"derive": "schedule_policy.real"}, "only numbers, param names"),
        ({"derive": "nope + 1"}, "params.page_size.derive: names 'nope', which is not a param"),
        ({"derive": "page_size + 1"}, "params.page_size.derive: 'page_size' cannot depend on"),
        (5, "params.page_size = 5: must be a mapping"),
    ],
)
def test_param_rules(tmp_path: Path, param: object, expected: str):
    assert expected in error_for(tmp_path, with_params(page_size=param))


def test_derive_must_be_as_conditional_as_what_it_uses(tmp_path: Path):
    data = with_params(
        page_size={"low": 1, "high": 2, "when": {"schedule_policy": "fcfs"}},
        chunked_prefill_size={"derive": "page_size * 2048"},
    )
    message = error_for(tmp_path, data)
    assert (
        "params.chunked_prefill_size.derive: uses 'page_size', which is only sampled when "
        "schedule_policy is one of ['fcfs']"
    ) in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"workload": {"kind": "sharegpt"}}, "workload.kind: 'sharegpt' is not a workload kind"),
        ({"workload": {"turns": 3}}, "workload.kind: is required"),
        (
            {"workload": {"kind": "random", "turns": 3}},
            "workload: workload key 'turns' does not apply to kind 'random'",
        ),
        ({"bench": {"arrival": "bursty"}}, "bench.arrival = 'bursty'"),
        ({"objectives": {"latency": "p50_tpot_ms"}}, "objectives.latency: 'p50_tpot_ms'"),
        ({"objectives": {"throughput": "tok_s"}}, "objectives.throughput: 'tok_s'"),
        ({"slos": ["p99_ttft <= 3"]}, "slos.0: 'p99_ttft' is not a benchmark metric"),
        ({"slos": ["p99_ttft_ms < 3"]}, "slos.0: operator '<'"),
        ({"slos": ["p99_ttft_ms <= fast"]}, "the limit 'fast' is not a number"),
        ({"bench": {"concurrency": 0}}, "bench.concurrency = 0"),
        ({"bench": {"api": "grpc"}}, "bench.api = 'grpc'"),
        ({"engine": {"name": "vllm"}}, "engine.name = 'vllm'"),
        ({"fixed_flags": {"enable-metrics": True}}, "fixed_flags.enable-metrics: 'enable-metrics'"),
        ({"fixed_flags": {"port": 1}}, "fixed_flags.port: is set by the launcher"),
        ({"fixed_flags": {"schedule_policy": "lpm"}}, "params.schedule_policy: is also in"),
        ({"name": "my study"}, "name: 'my study' is not a usable study name"),
        ({"params": {}}, "params: at least one tuned param is needed"),
    ],
)
def test_section_rules(tmp_path: Path, change: dict[str, Any], expected: str):
    assert expected in error_for(tmp_path, dict(MINIMAL, **change))


def test_missing_required_key(tmp_path: Path):
    data = {k: v for k, v in MINIMAL.items() if k != "model_path"}
    assert "model_path: required key is missing" in error_for(tmp_path, data)


def test_non_mapping_file(tmp_path: Path):
    assert "must be a YAML mapping" in error_for(tmp_path, "- a\n- b\n")


# --------------------------------------------------------------------------- suggestion


def test_conditional_suggestion_with_multivariate_group_tpe():
    space = load_space(default_space_path())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            multivariate=True, group=True, seed=1, n_startup_trials=8
        )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    seen: list[dict[str, object]] = []

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        flags = suggest_flags(trial, space)
        seen.append(flags)
        # Something the sampler can learn from, so the TPE phase is really exercised.
        tput = flags["max_running_requests"] * (2.0 if flags["speculative_algorithm"] else 1.0)
        return tput, float(flags["mem_fraction_static"])

    study.optimize(objective, n_trials=30)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)

    speculative = [f for f in seen if f["speculative_algorithm"] == "NEXTN"]
    plain = [f for f in seen if f["speculative_algorithm"] is None]
    assert speculative and plain
    for flags in speculative:
        assert 1 <= flags["speculative_num_steps"] <= 5
        assert flags["speculative_eagle_topk"] == 1
        assert flags["speculative_num_draft_tokens"] == flags["speculative_num_steps"] + 1
    for flags in plain:
        assert not any(k.startswith("speculative_") and k != "speculative_algorithm" for k in flags)

    hicache = [f for f in seen if f["enable_hierarchical_cache"]]
    assert hicache and len(hicache) < len(seen)
    for flags in seen:
        on = flags["enable_hierarchical_cache"] is True
        assert ("hicache_ratio" in flags) == on and ("hicache_write_policy" in flags) == on
        if on:
            assert 1.0 <= flags["hicache_ratio"] <= 8.0
        assert 0.70 <= flags["mem_fraction_static"] <= 0.95
        # stepped floats come back as the number a user would type
        assert flags["mem_fraction_static"] == round(flags["mem_fraction_static"], 2)
        assert 1 <= flags["max_running_requests"] <= 16  # high: concurrency
        assert flags["chunked_prefill_size"] in (2048, 4096, 8192, 16384)
        assert flags["mamba_radix_cache_strategy"] in ("no_buffer", "extra_buffer")

    # The trial's Optuna params are exactly the sampled (non-derived) flags.
    for trial, flags in zip(study.trials, seen, strict=True):
        assert set(trial.params) == set(flags) - {"speculative_num_draft_tokens"}


def test_condition_with_a_list_of_values_and_chained_conditions(tmp_path: Path):
    data = with_params(
        page_size={"choices": [1, 2, 3], "when": {"schedule_policy": ["fcfs"]}},
        mem_fraction_static={"low": 0.5, "high": 1.0, "when": {"page_size": [2, 3]}},
        chunked_prefill_size={
            "derive": "max(page_size, 2) * 10",
            "when": {"schedule_policy": "fcfs"},
        },
    )
    space = load_space(write(tmp_path, data))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(20):
        trial = study.ask()
        flags = suggest_flags(trial, space)
        study.tell(trial, 0.0)
        if flags["schedule_policy"] == "lpm":
            assert set(flags) == {"schedule_policy"}
        else:
            assert ("mem_fraction_static" in flags) == (flags["page_size"] in (2, 3))
            assert flags["chunked_prefill_size"] == max(flags["page_size"], 2) * 10


def test_boolean_condition_does_not_match_one(tmp_path: Path):
    data = copy.deepcopy(MINIMAL)
    data["params"] = {
        "page_size": {"choices": [1]},
        "schedule_policy": {"choices": ["lpm"], "when": {"page_size": True}},
    }
    message = error_for(tmp_path, data)
    assert (
        "params.schedule_policy.when.page_size: True is not one of page_size's choices" in message
    )


# --------------------------------------------------------------------------- engine checks


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"params": {"mem_fracton_static": {"low": 0.7, "high": 0.9}}},
            "params.mem_fracton_static: sglang 0.5.23 has no flag 'mem_fracton_static' "
            "(--mem-fracton-static); did you mean mem_fraction_static?",
        ),
        (
            {"params": {"hicache_write_policy": {"choices": ["write_through", "sometimes"]}}},
            "params.hicache_write_policy.choices: hicache_write_policy='sometimes' is not accepted "
            "by sglang 0.5.23 --hicache-write-policy; choose one of: write_back, write_through",
        ),
        (
            {"params": {"max_running_requests": {"low": 0.5, "high": 8}}},
            "params.max_running_requests.low: sglang 0.5.23 would reject its arguments: "
            "argument --max-running-requests: invalid int value: '0.5'",
        ),
        (
            {"fixed_flags": {"enable_metrics": "yes"}},
            "fixed_flags.enable_metrics: enable_metrics='yes': --enable-metrics is a switch",
        ),
        ({"engine": {"version": "0.4.0"}}, "engine.version: no flag snapshot for sglang 0.4.0"),
        (
            {"engine": {"version": "0.5.3"}, "fixed_flags": {"cuda_graph_max_bs_prefill": 8}},
            "fixed_flags.cuda_graph_max_bs_prefill: sglang 0.5.3 has no flag",
        ),
    ],
)
def test_flags_and_values_are_checked_against_the_engine_version(
    tmp_path: Path, change: dict[str, Any], expected: str
):
    assert expected in error_for(tmp_path, dict(MINIMAL, **change))


def test_renamed_flags_are_accepted_for_every_version(tmp_path: Path):
    for version in ("0.5.10", "0.5.23"):
        data = dict(
            MINIMAL,
            engine={"name": "sglang", "version": version},
            params={
                "mamba_radix_cache_strategy": {"choices": ["no_buffer", "extra_buffer"]},
                "cuda_graph_max_bs_decode": {"choices": [8, 16]},
            },
        )
        assert load_space(write(tmp_path, data)).engine_version == version
