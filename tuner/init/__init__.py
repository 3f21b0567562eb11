"""`tuner init`: a commented search space for the user's own model and GPU.

facts.py    what this host can tell without downloading or launching anything: the model's
            config.json, the GPU (NVML, --gpu, the simulator's hardware), host RAM, the
            sglang version
params.py   which sglang flags apply to that model and workload, their bounds and why
write.py    the YAML text: header, params with a comment each, workload, objectives, SLOs
command.py  the `tuner init` command line (registered by tuner/cli.py)
"""
