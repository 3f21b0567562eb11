"""The trial path: search space, sampler, study loop, workers, objective, serving and pruning."""
