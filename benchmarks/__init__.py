"""The benchmarks: scripts (`python benchmarks/NAME.py`) and the quality benchmark's package
(`python -m benchmarks.quality`), which imports `benchmarks.oracle_measurer` as a package."""
