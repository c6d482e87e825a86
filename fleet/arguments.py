"""The argument parser every `fleet <command>` starts from, and the defaults arguments share."""

import argparse
import getpass
import socket


def command_parser(command: str, doc: str | None) -> argparse.ArgumentParser:
    """`fleet <command>`'s parser: its usage names the command, its module docstring is the
    description, shown as written (the docstrings line their examples up by hand)."""
    return argparse.ArgumentParser(prog=f"fleet {command}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def default_actor() -> str:
    """`$USER@host`: who the audit log names for a change made from this shell."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
