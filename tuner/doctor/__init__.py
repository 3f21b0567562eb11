"""`tuner doctor`: is this host ready for real sglang? One line per check, ok / warn / fail.

    checks = run_checks(DoctorSetting.resolve(space_path=Path("my-model.yaml")))
    print(checks[0].line())                # "ok   engine: ... imports sglang 0.5.23 ..."
    any(c.status == FAIL for c in checks)  # `tuner doctor` exits 2

The same checks run before trial 0 of `tuner optimize --engine sglang`
(tuner/optimize/preflight.py). NVML is asked through tuner.host.NVML only; everything else is
read from this host as it is.
"""

from tuner.doctor.check import FAIL, OK, WARN, Check, tally
from tuner.doctor.checks import run_checks
from tuner.doctor.setting import DoctorSetting

__all__ = [
    "FAIL",
    "OK",
    "WARN",
    "Check",
    "DoctorSetting",
    "run_checks",
    "tally",
]
