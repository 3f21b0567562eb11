"""Optuna-driven auto-tuner for SGLang launch parameters.

The package, top to bottom (imports point down; tests/test_architecture.py checks it):

    cli.py         the `tuner` command line: parse options, call one function per command
    optimize/      `tuner optimize`: pre-flight (release, cost, --dry-run), live display, summary
    init/          `tuner init`: a commented search space for the user's model and GPU
    doctor/        `tuner doctor`: engine, flags, model, GPUs, RAM, ports and disk, one line each
    study/         the run resolved once, the study loop, sampler, budget, guide, local search,
                   stop rule, workers, recovery
    trial/         one trial: objective, launch and measure by stages, pruning, crash model
    predict/       from public facts: memory plan, performance estimate, GPU table, capacity
    space/         the search-space language: model, YAML schema, checks, loading, expressions
    results/       what trials leave and who reads it: records, report, export, studies, dashboard
    host.py        what this machine offers: GPU, the model's config.json, the installed sglang
    engines/       sglang per version: flags to argv, start-up rules, log parsing
    launcher.py    start a server in its own process group, wait until ready, stop it
    bench/         workloads, streaming client, metrics and the staged benchmark runner
    sim/           the simulated SGLang server (`python -m tuner.sim`), apart from the rest
"""

__version__ = "0.1.0"
