"""The one way the fleet's tools (benchmarks, chaos) and the tests pick a free loopback port."""

import socket


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS's pick; a later bind may still race)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
