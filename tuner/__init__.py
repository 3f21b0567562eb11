"""Optuna-driven auto-tuner for SGLang launch parameters.

The package, in the order a trial uses it:

    cli.py         the `tuner` command line: parse options, call one function per command
    optimize.py    `tuner optimize` end to end: live display (progress.py), study, summary.py;
                   preflight.py first: the installed sglang, the cost, --dry-run
    init/          `tuner init`: a commented search space for the user's model and GPU
    search/        the trial path: space, sampler, study loop, workers, objective, serving, pruning
    engines/       sglang per version: flags to argv, start-up rules, log parsing
    launcher.py    start a server in its own process group, wait until ready, stop it
    bench/         workloads, streaming client, metrics and the staged benchmark runner
    results/       what trials leave and who reads it: records, report, export, studies, dashboard
    sim/           the simulated SGLang server (`python -m tuner.sim`), apart from the rest
"""

__version__ = "0.1.0"
