import subprocess
import sys

from tuner import __version__


def test_version_command_prints_package_version():
    out = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == __version__
