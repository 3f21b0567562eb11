"""sglang argv building and validation against the committed parser snapshots."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import optuna
import pytest

from tuner.engines import sglang
from tuner.engines._sglang_versions import canonical_name
from tuner.engines.sglang import (
    LAUNCH_MODULE,
    READY_LINE,
    RENAMED_IN,
    build_server_args,
    load_snapshot,
    nearest_known_version,
    resolve_flag,
    supported_versions,
    validate_server_args,
)
from tuner.engines.snapshot import ParserSnapshot, SnapshotParseError, human_readable_int
from tuner.errors import UserError
from tuner.optimize.version_check import translate_space
from tuner.space.load import default_space_path, load_space, shipped_spaces, space_from_dict
from tuner.space.model import suggest_flags

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tuner" / "engines" / "snapshots"
OLD = "0.5.10"
NEW = "0.5.23"


def test_constants():
    assert LAUNCH_MODULE == "sglang.launch_server"
    assert READY_LINE == "The server is fired up and ready to roll!"


# --------------------------------------------------------------------------- snapshots


def test_every_release_of_the_0_5_line_and_the_last_0_4_ones_has_a_snapshot():
    versions = supported_versions()
    for release in [
        "0.4.9",
        "0.4.10",
        "0.4.10.post1",
        "0.4.10.post2",
        "0.5.1",
        "0.5.3",
        "0.5.10.post1",
        "0.5.16",
        "0.5.21",
        "0.5.22",
        "0.5.23",
    ]:
        assert release in versions
    assert len([v for v in versions if v.startswith("0.5.")]) == 42  # 0.5.1 ... 0.5.23 + posts
    assert versions.index("0.5.9") < versions.index("0.5.10") < versions.index("0.5.10.post1")
    assert sorted(p.name for p in SNAPSHOTS.glob("*.json")) == sorted(
        f"sglang-{v}.json" for v in versions
    )


def test_snapshots_stay_small():
    # They ship in the package: each release but the oldest holds only what it changed.
    total = sum(p.stat().st_size for p in SNAPSHOTS.glob("*.json"))
    assert total < 800_000
    assert max(p.stat().st_size for p in SNAPSHOTS.glob("*.json")) < 60_000


@pytest.mark.parametrize("path", sorted(SNAPSHOTS.glob("sglang-*.json")), ids=lambda p: p.name)
def test_snapshot_files_are_dumps_of_the_real_parser(path: Path):
    data = json.loads(path.read_text())
    assert data["format"] == 2 and data["generated_by"] == "tools/dump_sglang_flags.py"
    assert path.name == f"sglang-{data['sglang_version']}.json"
    assert data["source"].startswith("wheel sglang-")  # no machine path in a committed file
    snapshot = load_snapshot(data["sglang_version"])
    assert snapshot.version == data["sglang_version"]
    assert len(snapshot.options) > 150
    model = snapshot.option("model_path")
    assert model.flags[0] == "--model-path" and model.required is True


def test_a_release_file_holds_what_changed_against_the_one_before():
    data = json.loads((SNAPSHOTS / "sglang-0.5.14.json").read_text())
    assert data["base"] == "0.5.13.post1"
    changed = {e["flags"][0]: e for e in data["options"] if isinstance(e, dict)}
    assert "--mamba-radix-cache-strategy" in changed  # new in 0.5.14
    # sglang's own deprecation alias for the old name, storing into the new one
    old = changed["--mamba-scheduler-strategy"]
    assert old["new_flag"] == "--mamba-radix-cache-strategy"
    assert old["dest"] == "mamba_radix_cache_strategy"
    assert "model-path" in data["options"]  # unchanged: named only
    assert load_snapshot("0.5.13").option("mamba_radix_cache_strategy") is None


def test_load_snapshot_knows_aliases_types_and_choices():
    new = load_snapshot(NEW)
    assert new.version == NEW
    assert new.option("--enable-hicache") is new.option("enable_hierarchical_cache")
    assert new.option("mem_fraction_static").type == "float"
    assert new.option("max_total_tokens").type == "human_readable_int"
    strategy = new.option("mamba_radix_cache_strategy")
    assert strategy.choices == ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
    assert new.option("speculative_algorithm").choices is None  # checked at start-up instead
    assert new.option("cuda_graph_max_bs") is None

    old = load_snapshot(OLD)
    assert old.option("mamba_scheduler_strategy").choices == ("auto", "no_buffer", "extra_buffer")
    assert old.option("mamba_radix_cache_strategy") is None
    assert old.option("cuda_graph_max_bs").type == "int"
    assert "NEXTN" in old.option("speculative_algorithm").choices


def test_unknown_version_lists_known_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_SGLANG_FLAGS_CACHE", str(tmp_path))
    with pytest.raises(UserError, match=r"no flag snapshot for sglang 0\.6\.0; known versions: "):
        load_snapshot("0.6.0")


def test_post_release_without_a_snapshot_uses_its_base_snapshot():
    assert load_snapshot("0.5.10.post1").version == "0.5.10.post1"  # its own
    assert load_snapshot("0.5.23.post1").version == "0.5.23"


def test_renames_are_followed_through_every_release():
    # Each name of a flag reaches the release's own name, also across two renames.
    assert resolve_flag("cuda_graph_max_bs_decode", "0.5.10").flags == ("--cuda-graph-max-bs",)
    assert resolve_flag("cuda_graph_max_bs", "0.5.20").flags == ("--cuda-graph-max-bs-decode",)
    assert resolve_flag("dsa_decode_backend", "0.5.3").flags == ("--nsa-decode",)
    assert resolve_flag("nsa_decode", "0.5.23").flags == ("--dsa-decode-backend",)
    # 0.5.14-0.5.19 keep the old name as a deprecation pointing at the new one: use the new.
    assert resolve_flag("mamba_scheduler_strategy", "0.5.16").flags == (
        "--mamba-radix-cache-strategy",
    )
    assert canonical_name("--nsa-prefill") == "dsa_prefill_backend"
    assert RENAMED_IN["mamba_scheduler_strategy"] == "0.5.14"


@pytest.mark.parametrize(("old", "new"), sglang.RENAMED_FLAGS)
def test_each_rename_is_what_the_snapshots_show(old, new):
    # (RENAMED_FLAGS lists (newer, older); the parameters are named the other way round.)
    newer, older = old, new
    since = RENAMED_IN[older]
    versions = supported_versions()
    before = versions[versions.index(since) - 1]
    assert load_snapshot(since).option(newer) is not None
    assert load_snapshot(before).option(newer) is None
    assert load_snapshot(before).option(older) is not None


def test_nearest_known_release():
    assert nearest_known_version("0.5.21") == "0.5.21"
    assert nearest_known_version("0.5.23.post1") == "0.5.23"
    assert nearest_known_version("0.5.24") == "0.5.23"
    assert nearest_known_version("0.5.24.dev0") == "0.5.23"
    assert nearest_known_version("0.6.0") == "0.5.23"
    assert nearest_known_version("0.5.2.post1") == "0.5.2"
    assert nearest_known_version("0.4.8") == "0.4.9"  # older than all: the oldest


def _dump_tool():
    from tuner.engines import _parser_dump

    return _parser_dump


def test_dump_and_rebuild_round_trip_on_a_small_parser():
    """The dump tool's description of a parser, read back by ParserSnapshot, accepts and
    rejects what the original parser does (without downloading sglang)."""
    tool = _dump_tool()

    class Retired(argparse.Action):
        def __init__(self, option_strings, dest, error_message=None, nargs=0, **kw):
            self.error_message = error_message
            super().__init__(option_strings, dest, nargs=nargs, **kw)

        def __call__(self, parser, namespace, values, option_string=None):
            parser.error(self.error_message)

    real = argparse.ArgumentParser(prog="demo", exit_on_error=False)
    real.add_argument("--model-path", "--model", required=True)
    real.add_argument("--ratio", type=float, default=2.0)
    real.add_argument("--size", type=human_readable_int)
    real.add_argument("--mode", choices={"b", "a"}, default="a")
    real.add_argument("--paths", nargs="*")
    real.add_argument("--fast", action="store_true")
    real.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True)
    real.add_argument("--old", action=Retired, error_message="--old was removed; use --mode")

    document = tool.snapshot_document("9.9", "test", real)
    snapshot = ParserSnapshot.from_json(json.dumps(document))
    mode = snapshot.option("mode")
    assert mode.choices == ("a", "b")  # sets are sorted so the file diffs cleanly
    assert snapshot.option("old").error_message == "--old was removed; use --mode"

    accepted = [
        ["--model", "m"],
        ["--model-path", "m", "--ratio", "1.5", "--size", "2k", "--mode", "b", "--fast"],
        ["--model", "m", "--paths", "x", "y", "--no-overlap"],
        ["--model-p", "m"],  # argparse prefix matching, as in the real parser
    ]
    for args in accepted:
        expected = vars(real.parse_args(args))
        assert vars(snapshot.parse(args)) == expected
    rejected = [
        [],
        ["--model", "m", "--ratio", "x"],
        ["--model", "m", "--mode", "c"],
        ["--model", "m", "--size", "1.5Ki"],
        ["--model", "m", "--old"],
        ["--model", "m", "--unknown"],
        ["--mod", "m"],  # ambiguous prefix
    ]
    for args in rejected:
        with pytest.raises(SnapshotParseError):
            snapshot.parse(args)


def test_dump_tool_refuses_stand_ins_in_the_parser():
    tool = _dump_tool()
    stand_in = tool._stand_in("torch.float16")
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default=stand_in)
    with pytest.raises(SystemExit, match=r"dtype\.default"):
        tool.describe_parser(parser)


def test_dump_tool_says_which_package_an_empty_parser_needs():
    assert tool_message({"msgspec", "torch"}).startswith(
        "sglang's parser came out empty without msgspec: install it into that environment"
    )
    assert "missing packages: numpy, torch" in tool_message({"torch", "numpy"})


def tool_message(stood_in):
    return _dump_tool()._empty_parser_message(stood_in)


# --------------------------------------------------------------------------- build_server_args


def test_build_server_args_example_from_the_contract():
    flags = {
        "mem_fraction_static": 0.85,
        "enable_hierarchical_cache": True,
        "mamba_radix_cache_strategy": "extra_buffer",
        "speculative_algorithm": None,
    }
    assert build_server_args(flags, NEW) == [
        "--mem-fraction-static",
        "0.85",
        "--enable-hierarchical-cache",
        "--mamba-radix-cache-strategy",
        "extra_buffer",
    ]
    assert build_server_args(flags, OLD) == [
        "--mem-fraction-static",
        "0.85",
        "--enable-hierarchical-cache",
        "--mamba-scheduler-strategy",
        "extra_buffer",
    ]


@pytest.mark.parametrize(
    ("flags", "version", "expected"),
    [
        ({"cuda_graph_max_bs_decode": 64}, OLD, ["--cuda-graph-max-bs", "64"]),
        ({"cuda_graph_max_bs": 64}, NEW, ["--cuda-graph-max-bs-decode", "64"]),
        ({"cuda_graph_max_bs_prefill": 8}, OLD, ["--piecewise-cuda-graph-max-tokens", "8"]),
        (
            {"mamba_scheduler_strategy": "no_buffer"},
            NEW,
            ["--mamba-radix-cache-strategy", "no_buffer"],
        ),
        ({"enable_metrics": False, "disable_radix_cache": False}, NEW, []),
        ({"enable_hicache": True}, NEW, ["--enable-hierarchical-cache"]),
        (
            {"hicache_ratio": 2.5, "max_running_requests": 19},
            OLD,
            ["--hicache-ratio", "2.5", "--max-running-requests", "19"],
        ),
        ({"max_total_tokens": "200k"}, NEW, ["--max-total-tokens", "200k"]),
        (
            {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3},
            OLD,
            ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"],
        ),
        ({"chunked_prefill_size": -1}, NEW, ["--chunked-prefill-size", "-1"]),
        ({"model_path": "Qwen/Qwen3.6-27B"}, NEW, ["--model-path", "Qwen/Qwen3.6-27B"]),
    ],
)
def test_build_server_args_names_and_values(flags, version, expected):
    assert build_server_args(flags, version) == expected


def test_boolean_optional_flags_get_the_explicit_form():
    snapshot = load_snapshot(NEW)
    pair = next(o for o in snapshot.options if o.kind == "boolean_optional")
    name = pair.flags[0][2:].replace("-", "_")
    on = build_server_args({name: True}, NEW)
    off = build_server_args({name: False}, NEW)
    assert on == [pair.flags[0]]
    assert off[0].startswith("--no-")


@pytest.mark.parametrize(
    ("flags", "version", "message"),
    [
        (
            {"mem_fracton_static": 0.8},
            NEW,
            "no flag 'mem_fracton_static' (--mem-fracton-static); "
            "did you mean mem_fraction_static?",
        ),
        (
            {"cuda_graph_max_bs_prefill": 8},
            "0.5.3",
            "sglang 0.5.3 has no flag 'cuda_graph_max_bs_prefill'",
        ),
        (
            {"mamba_radix_cache_strategy": "extra_buffer_lazy"},
            OLD,
            "mamba_radix_cache_strategy='extra_buffer_lazy' is not accepted by sglang 0.5.10 "
            "--mamba-scheduler-strategy; choose one of: auto, no_buffer, extra_buffer",
        ),
        (
            {"hicache_write_policy": "write_sometimes"},
            NEW,
            "choose one of: write_back, write_through, write_through_selective",
        ),
        (
            {"speculative_algorithm": "MTP"},
            OLD,
            "speculative_algorithm='MTP' is not accepted by sglang 0.5.10",
        ),
        (
            {"enable_metrics": "yes"},
            NEW,
            "--enable-metrics is a switch in sglang 0.5.23; give true or false",
        ),
        (
            {"mem_fraction_static": True},
            NEW,
            "--mem-fraction-static takes a value in sglang 0.5.23, not a switch",
        ),
        (
            {"mem_fraction_static": "high"},
            NEW,
            "argument --mem-fraction-static: invalid float value: 'high'",
        ),
        ({"max_running_requests": [1, 2]}, NEW, "--max-running-requests takes one value"),
        ({"max_total_tokens": "2.5Ki"}, NEW, "argument --max-total-tokens"),
        ({"mem_fraction_static": 0.8}, "0.4.0", "no flag snapshot for sglang 0.4.0"),
    ],
)
def test_build_server_args_errors(flags, version, message):
    with pytest.raises(UserError) as info:
        build_server_args(flags, version)
    assert message in str(info.value)


def test_retired_flag_with_an_error_message_is_refused():
    snapshot = load_snapshot(NEW)
    retired = [o for o in snapshot.options if o.error_message]
    for option in retired:  # none in 0.5.23 today; keep the rule honest when one appears
        with pytest.raises(UserError, match="rejects"):
            build_server_args({option.flags[0][2:].replace("-", "_"): True}, NEW)


# --------------------------------------------------------------------------- validate_server_args


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11", "0.5.23"])
def test_full_argv_validates(version: str):
    flags = {
        "model_path": "Qwen/Qwen3.6-27B",
        "enable_metrics": True,
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "mem_fraction_static": 0.83,
        "enable_hierarchical_cache": True,
        "hicache_ratio": 4.0,
        "hicache_write_policy": "write_back",
        "mamba_radix_cache_strategy": "extra_buffer",
        "max_running_requests": 32,
        "chunked_prefill_size": 4096,
        "cuda_graph_max_bs_decode": 32,
    }
    args = build_server_args(flags, version)
    validate_server_args(args, version)
    validate_server_args([*args, "--host", "127.0.0.1", "--port", "30001"], version)


@pytest.mark.parametrize(
    ("args", "version", "message"),
    [
        (
            ["--mem-fraction-static", "0.8"],
            NEW,
            "the following arguments are required: --model-path/--model",
        ),
        (
            ["--model", "m", "--cuda-graph-max-bs", "8"],
            NEW,
            "ambiguous option: --cuda-graph-max-bs could match",
        ),
        (
            ["--model", "m", "--mamba-scheduler-strategy", "no_buffer"],
            NEW,
            "unrecognized arguments: --mamba-scheduler-strategy",
        ),
        (
            ["--model", "m", "--mamba-radix-cache-strategy", "no_buffer"],
            OLD,
            "unrecognized arguments: --mamba-radix-cache-strategy",
        ),
        (
            ["--model", "m", "--speculative-algorithm", "MTP"],
            OLD,
            "argument --speculative-algorithm: invalid choice: 'MTP'",
        ),
        (["--model", "m", "--hicache-ratio", "two"], NEW, "invalid float value: 'two'"),
    ],
)
def test_validate_server_args_rejects_what_sglang_rejects(args, version, message):
    with pytest.raises(UserError) as info:
        validate_server_args(args, version)
    assert message in str(info.value)
    assert f"sglang {version} would reject its arguments" in str(info.value)


def test_validate_accepts_what_parses_but_fails_at_startup():
    # 0.5.23 has no argparse choices for the algorithm; check_startup_rules reports MTP.
    validate_server_args(["--model", "m", "--speculative-algorithm", "MTP"], NEW)


@pytest.mark.parametrize("name", ["qwen3.6-27b-mtp-hicache", "qwen3-8b-h200"])
@pytest.mark.parametrize("version", ["0.5.10", "0.5.11", "0.5.23"])
def test_every_sampled_config_of_the_shipped_spaces_is_valid_argv(name: str, version: str):
    # As `tuner optimize --engine sglang` runs a space on another release: translated for it
    # (a flag the release lacks, such as 0.5.23's --speculative-adaptive on 0.5.10, left out).
    data, _ = translate_space(load_space(name), version)
    space = space_from_dict(data, f"{name} for {version}")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
    for _ in range(30):
        trial = study.ask()
        flags = {"model_path": space.model_path, **space.fixed_flags, **suggest_flags(trial, space)}
        study.tell(trial, 0.0)
        validate_server_args(build_server_args(flags, version), version)


def test_shipped_spaces_exist():
    assert default_space_path().stem in shipped_spaces()
    assert sglang.CANONICAL_VERSION == NEW
