"""``python -m tuner.sim``: a drop-in for ``python -m sglang.launch_server`` without a GPU."""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import sys

from tuner.sim import startup_log as logs
from tuner.sim.args import parse_args
from tuner.sim.config import resolve
from tuner.sim.failures import StartupFailure
from tuner.sim.profiles import ProfileError, describe


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.sim_describe:
        # What nvml and the model directory tell about a real GPU and checkpoint: the tuner's
        # pre-launch memory check reads the simulated ones through this.
        try:
            print(
                json.dumps(
                    describe(
                        args.sim_hardware,
                        args.sim_model,
                        args.model_path,
                        args.sim_profile_overrides,
                    )
                )
            )
        except ProfileError as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 2
        return 0
    try:
        config = resolve(args)
    except ProfileError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except StartupFailure as failure:
        logs.emit(logs.server_args_line(args))
        for line in logs.failure_lines(failure, in_scheduler=False):
            sys.stderr.write(line + "\n")
        return 1
    logs.emit(logs.server_args_line(args))
    for warning in config.warnings:
        logs.emit(f"WARNING: {warning}")
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            sys.stderr.write(
                f"ERROR: [Errno {errno.EADDRINUSE}] error while attempting to bind "
                f"on address ('{args.host}', {args.port}): address already in use\n"
            )
            return 1
        raise
    from tuner.sim.server import SimServer

    server = SimServer(config, sock)
    asyncio.run(server.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
