"""The estimate copies nothing from the simulator: no simulator constant appears in its code.

The simulator's profiles hold two kinds of numbers: public facts (spec-sheet figures, the
checkpoint's config.json), which the tuner reads from its own sources too, and the simulator's
own modelling constants (efficiencies, overheads, acceptance), which stand in for a GPU the
tuner must learn from trials. This test reads every number of the second kind (in ms, s and
x1000 forms) and fails when one appears as a literal in the estimate's modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "tuner" / "sim" / "profiles"
ESTIMATE_MODULES = [
    ROOT / "tuner" / "predict" / name
    for name in (
        "estimate.py",
        "priors.py",
        "workload_shape.py",
        "capacity_bound.py",
        "open_loop.py",
    )
]

# Public facts a profile repeats: spec sheets and config.json. Anything else is the simulator's.
PUBLIC_KEYS = {
    "gpu_memory_gib", "hbm_bandwidth_gb_s", "bf16_tflops", "pcie_gb_s", "host_ram_gib",
    "num_layers", "full_attention_layers", "linear_attention_layers", "hidden_size",
    "intermediate_size", "num_attention_heads", "num_kv_heads", "head_dim", "vocab_size",
    "context_length", "dtype_bytes", "weight_bytes", "mamba_conv_elements_per_layer",
    "mamba_conv_dtype_bytes", "mamba_ssm_elements_per_layer", "layers", "head_bytes",
    "num_experts", "num_experts_per_tok", "memory_gb",
}  # fmt: skip

# Literals that are not world constants: counts and exponents of the math itself, and the
# estimate's own search grids (their ratios, not any GPU's figure).
TRIVIAL = {0.0, 1.0, 2.0, -1.0, 0.5, 1e9, 1e12, 1000.0, 1e-9, 1e-12}
ALLOWED = {
    ("estimate.py", 1.12): "ratio of the estimate's geometric fraction grid",
    ("estimate.py", 0.15): "lower end of the fraction grid (x the spec sheet)",
    ("estimate.py", 0.0002): "first non-zero step overhead of the fit's grid",
    ("estimate.py", 1.5): "ratio of the overhead grid",
    ("estimate.py", 0.01): "a cache hit rate this low says the server reports no hits",
}


def _simulator_constants() -> dict[float, str]:
    found: dict[float, str] = {}

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if str(key) not in PUBLIC_KEYS:
                    walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")
        elif isinstance(node, int | float) and not isinstance(node, bool):
            found.setdefault(float(node), path)

    for file in sorted(PROFILES.rglob("*.yaml")):
        walk(yaml.safe_load(file.read_text(encoding="utf-8")), file.stem)
    return found


def _literals(path: Path) -> list[tuple[int, float]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        value = node.value if isinstance(node, ast.Constant) else None
        # Counts and defaults are whole numbers (3 draft steps, 16 conversations); a copied
        # efficiency, overhead in seconds or acceptance is not.
        if isinstance(value, float) and not value.is_integer():
            out.append((node.lineno, value))
    return out


def _matches(literal: float, constants: dict[float, str]) -> str | None:
    for scale in (1.0, 1e-3, 1e3):  # ms written as s, or s as ms
        for value, where in constants.items():
            if (
                value not in TRIVIAL
                and value != 0
                and abs(literal - value * scale) <= 1e-9 * abs(literal)
            ):
                return where
    return None


def test_the_simulator_has_modelling_constants_to_check_against():
    constants = _simulator_constants()
    assert len(constants) >= 8, constants  # efficiencies, overheads, acceptance ...


def test_no_simulator_constant_appears_in_the_estimate():
    constants = _simulator_constants()
    copied = []
    for module in ESTIMATE_MODULES:
        for line, literal in _literals(module):
            if literal in TRIVIAL or (module.name, literal) in ALLOWED:
                continue
            where = _matches(literal, constants)
            if where is not None:
                copied.append(f"{module.name}:{line} {literal:g} = simulator {where}")
    assert not copied, "the estimate repeats simulator constants: " + "; ".join(copied)


def test_the_check_catches_the_constants_the_estimate_once_copied(tmp_path):
    # The eager-step overhead (7 ms) and acceptance (0.88) of the seed profiles, as the estimate
    # carried them before (EAGER_OVERHEAD_S = 0.007).
    copy = tmp_path / "estimate.py"
    copy.write_text("EAGER_OVERHEAD_S = 0.007\nACCEPT = 0.88\nBANDWIDTH = 0.8\n")
    constants = _simulator_constants()
    hits = [_matches(v, constants) for _, v in _literals(copy)]
    assert all(hits), hits
