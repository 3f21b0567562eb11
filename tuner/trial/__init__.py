"""One trial: sample, check, launch and measure by stages, prune, record.

    objective = TrialObjective(ObjectiveConfig(space=..., study_dir=..., target=...))

Modules: `objective` (the trial from its flags to its recorded values), `measure` (how a trial
is measured: launch the server and benchmark it over HTTP, or any other `Measurer`),
`pruning` (the stage pruner that works in multi-objective studies), `identical` (identical
proposals launch once), `crash_model` (the learned model that skips likely crashes).
"""

from tuner.trial.crash_model import CrashModel, CrashPrediction, LaunchObservation
from tuner.trial.measure import LaunchAndMeasure, Measurement, Measurer, ReadyHook, StageHook
from tuner.trial.objective import EventHook, ObjectiveConfig, TrialObjective
from tuner.trial.pruning import PruneDecision, StagePruner, StagePrunerConfig, decide

__all__ = [
    "CrashModel",
    "CrashPrediction",
    "EventHook",
    "LaunchAndMeasure",
    "LaunchObservation",
    "Measurement",
    "Measurer",
    "ObjectiveConfig",
    "PruneDecision",
    "ReadyHook",
    "StageHook",
    "StagePruner",
    "StagePrunerConfig",
    "TrialObjective",
    "decide",
]
