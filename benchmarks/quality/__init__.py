"""How good is the tuner: what it finds, and what it costs, against the simulator's true optimum.

    python -m benchmarks.quality                               # the full run (README figures)
    python -m benchmarks.quality --budgets 20,40 --seeds 3 --served 0
    python -m benchmarks.quality --fast --out OUT_DIR          # ~40 s; what the test suite runs

(`python benchmarks/tuner_quality.py ...` runs the same.) The modules, one concept each:

    methods.py   the methods compared (what each one sets) and the run's options
    grid.py      configurations of a space: values, nested loops, the flags one stands for
    truth.py     noise-free figures from the oracle; the optimum (dense grid + refinement)
    study.py     one study of one method and seed through the real objective and study loop
    scoring.py   fractions of the optimum at each budget, trials and GPU hours to 95%, curves
    served.py    the measurement check: a few configurations served for real over HTTP
    report.py    the markdown table, the JSON of every figure, the plot
    cli.py       the command line and the run from start to end


Budgets 20, 40, 80 and 200 trials (200 so that trials-to-95% is measured for the methods that
take longer than 80), 5 seeds. Methods, each on the same budgets and seeds, all through the real
objective (`tuner.trial.TrialObjective` + `tuner.study.run_trials` on an in-memory Optuna
study) measured by the simulator's oracle (`benchmarks.oracle_measurer.OracleMeasurer`: no
server is launched; see that module for the noise and GPU-time models):

- default: TPESampler(multivariate, group) + stage pruning + feasibility model (memory estimate
  and learned crash classifier), sglang's defaults as trial 0 (`tuner optimize`);
- tpe-no-pruning / tpe-no-feasibility: the default with `--no-prune` / `--no-feasibility`;
- random: `tuner optimize --sampler random --no-prune --no-feasibility` (plain random search);
- gp / gp-no-guide (only when named in --methods; they need PyTorch): the default with
  `--sampler gp` (Optuna's GPSampler), with and without the warm start and polish;
- grid: what grid tuners do: nested loops over each parameter's values in the space file's
  order (the first parameter outermost, never shuffled), 4 values per numeric range (the
  values of `tuner.study.grid_search_space`), no pruning, no feasibility model, no default
  trial; the budget cuts the sweep short, as it would any grid tool's. Seeds change the
  measurement noise only;
- grid-shuffled: `tuner optimize --sampler grid --no-prune --no-feasibility` (Optuna's
  GridSampler over the same grid, in seeded random order), for contrast.

A study's first N trials do not depend on its budget (the sampler, pruner and feasibility model
never read it), so one study of the largest budget per method and seed gives the figures of
every smaller budget as its prefix.

The truth: every configuration's noise-free figures come from the oracle. The optimum is the
best SLO-feasible configuration of a dense grid of the space (every categorical choice, up to
--dense-points values of each numeric range, conditions honoured, the objective's
`check_startup_rules` applied), refined by coordinate sweeps (every value of one parameter at a
time) from the best points until nothing improves and from every point of the Pareto front, and
united with every configuration any study launched (the table says whether one beat the
search). The figures score what a tuner found at its true worth: a trial
counts when the tuner recorded it as complete and SLO-feasible (from its noisy measurement, as
its report would), and it counts with its noise-free throughput and latency, so a lucky
measurement flatters no method.

The space is judged exactly as shipped: the oracle is a headless run of the simulator's own
scheduler driven like `tuner bench` (tuner/sim/oracle.py), so it gives the same summary a served
benchmark gives, tail percentiles and multi-turn closed loops included.

Measurement check: a few configurations (sglang's defaults, the oracle's best, two front points, the
best just inside and just outside the SLO limit, a crashing one) are also launched as real
simulator processes (`tuner.trial.measure.LaunchAndMeasure`, the HTTP benchmark) and their figures
compared with what OracleMeasurer reports for them, with both SLO verdicts.

Outputs in --out (default benchmarks/results): tuner_quality.md (table), tuner_quality.json
(every figure, per seed), tuner_quality.png (best-so-far vs trials and vs GPU hours; plotly +
kaleido, which needs Chromium).
"""
