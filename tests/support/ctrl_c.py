"""Child processes that should react to Ctrl-C as in a terminal.

A shell that starts a job in the background (`.ci/run &`, nohup, some CI runners) sets SIGINT to
"ignore", every child inherits that, and Python leaves an ignored SIGINT alone: a test that sends
SIGINT would then wait for nothing. Restore the default in the child before it starts Python.
"""

import signal


def sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
