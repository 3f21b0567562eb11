"""Serve optuna-dashboard on a study's storage, on 127.0.0.1 only, until Ctrl-C.

optuna-dashboard is a live view (trials as they finish, notes, per-trial attrs). Version 0.21
reads only the old list-style constraints attribute; the tuner writes it beside Optuna 5's
per-key constraints (record.set_constraints), so its Pareto-front plot greys out the same
infeasible trials as the report.

Example:
    >>> serve_dashboard(storage, port=8080, on_ready=print)  # doctest: +SKIP
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from optuna.storages import BaseStorage

from tuner.errors import UserError

HOST = "127.0.0.1"  # a remote study is reached through an SSH tunnel, never a public port
DEFAULT_PORT = 8080


@dataclass(frozen=True)
class DashboardAddress:
    url: str  # the dashboard's home page
    study_url: str | None  # the study's page, when one study was asked for


class _ThreadedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # an open browser tab must not keep the process alive after Ctrl-C


class _QuietHandler(WSGIRequestHandler):
    # The dashboard polls every few seconds; one log line per request would bury the URL.
    def log_message(self, format: str, *args: object) -> None:
        return


def dashboard_address(port: int, storage: BaseStorage, study_name: str | None) -> DashboardAddress:
    base = f"http://{HOST}:{port}/dashboard/"
    if study_name is None:
        return DashboardAddress(base, None)
    study_id = storage.get_study_id_from_name(study_name)
    return DashboardAddress(base, f"{base}studies/{study_id}")


def serve_dashboard(
    storage: BaseStorage,
    *,
    port: int = DEFAULT_PORT,
    study_name: str | None = None,
    on_ready: Callable[[DashboardAddress], None] | None = None,
) -> None:
    """Serve until interrupted. KeyboardInterrupt propagates after the socket is closed, so
    the caller decides how to say goodbye; the port is free when this returns or raises."""
    from optuna_dashboard import wsgi

    app = wsgi(storage)
    try:
        server = make_server(
            HOST, port, app, server_class=_ThreadedServer, handler_class=_QuietHandler
        )
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UserError(
                f"port {port} on {HOST} is in use; pass --port with a free one"
            ) from None
        raise UserError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}") from None
    try:
        # The socket is bound and listening: the URL works from this moment.
        if on_ready is not None:
            on_ready(dashboard_address(server.server_port, storage, study_name))
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


def dashboard_command(storage: str | None, study: str | None, port: int, studies_dir: Path) -> None:
    """`tuner dashboard`: find the study (or all of a --storage), serve until Ctrl-C or SIGTERM."""
    import signal

    from typer import echo

    from tuner.results.storage import locate_study, open_existing_storage

    if storage is not None and study is None:
        opened, name = open_existing_storage(storage, studies_dir), None  # all its studies
    else:
        location, note = locate_study(storage, study, studies_dir)
        if note:
            echo(note, err=True)
        opened, name = location.storage, location.study_name

    def ready(address: DashboardAddress) -> None:
        echo(f"optuna-dashboard: {address.study_url or address.url}")
        echo("Ctrl-C stops.")

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # `kill` stops as cleanly as Ctrl-C
    try:
        serve_dashboard(opened, port=port, study_name=name, on_ready=ready)
    except KeyboardInterrupt:
        echo("dashboard stopped")
