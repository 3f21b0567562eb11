"""How a study's server is named wherever a study is shown: live display, summary, report, exports.

    engine_label("sglang", "0.5.23", "/opt/venv/bin/python")
    # 'real sglang 0.5.23 (python /opt/venv/bin/python)'
    engine_label("sim", "0.5.23")   # 'simulated sglang 0.5.23'

The simulator speaks a release's flags and log lines, so both name the release; only "real"
or "simulated" says whether a GPU (or CPU) measured the figures.
"""

from __future__ import annotations


def engine_label(engine: str | None, version: str | None, python: str | None = None) -> str:
    """`engine`: "sim" or "sglang" (a study's STUDY_ENGINE); None when a study did not record it."""
    release = f"sglang {version}" if version else "sglang (release unknown)"
    if engine == "sim":
        return f"simulated {release}"
    if engine == "sglang":
        return f"real {release}" + (f" (python {python})" if python else "")
    return f"{release} on an unrecorded engine"
