"""`python -m benchmarks.quality`: the quality benchmark's command line (cli.py)."""

from benchmarks.quality.cli import main

main()
