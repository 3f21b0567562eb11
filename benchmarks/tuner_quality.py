"""`python benchmarks/tuner_quality.py ...`: the quality benchmark by its file path, as the
README and the results' "Reproduce" lines call it; the code is the package benchmarks/quality/
(`python -m benchmarks.quality ...` runs the same)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

if __name__ == "__main__":
    # Run as a file, Python puts benchmarks/ first on the path; the package lives one folder up.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    importlib.import_module("benchmarks.quality.cli").main()
