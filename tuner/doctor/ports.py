"""Ports: the one the exported server will listen on, and free ones for the trials' servers.

Each trial's server gets a free port of its own; the exported launch script and sglang itself
default to 30000, and a server started there while another listens fails, or worse, warms up
against the other one.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from tuner import host
from tuner.doctor.check import FAIL, OK, WARN, Check
from tuner.doctor.setting import DoctorSetting
from tuner.launcher import port_is_free

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def ports_check(setting: DoctorSetting, address: str = "127.0.0.1") -> Check:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
    except OSError as exc:
        return Check("ports", FAIL, f"cannot bind any port on {address} for the trials: {exc}")
    port = setting.port
    which = "--port" if setting.port_given else "sglang's default port"
    if port_is_free(address, port):
        return Check(
            "ports", OK, f"{which} {port} on {address} is free; each trial takes a free port"
        )
    holder = listener(port)
    held = f" by pid {holder[0]}: {holder[1][:80]}" if holder else ""
    return Check(
        "ports",
        WARN,
        f"{which} {port} on {address} is in use{held}; trials take other ports, but a "
        f"server exported to {port} would not start (SGLANG_PORT=N picks another)",
    )


def listener(port: int) -> tuple[int, str] | None:
    """(pid, command line) of the process listening on `port`, when /proc shows it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            listening = len(fields) > 9 and fields[3] == _LISTEN
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        if _links(entry / "fd") & wanted:
            pid = int(entry.name)
            return pid, host.process_command(pid) or "?"
    return None


def _links(fd_dir: Path) -> set[str]:
    """What a process's open files point at; an fd closed while read is left out (the
    listing's own fd is, when the process is this one)."""
    links: set[str] = set()
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return links
    for fd in fds:
        with contextlib.suppress(OSError):
            links.add(os.readlink(fd))
    return links
