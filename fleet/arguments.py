"""The argument parser every `fleet <command>` starts from."""

import argparse


def command_parser(command: str, doc: str | None) -> argparse.ArgumentParser:
    """`fleet <command>`'s parser: its usage names the command, its module docstring is the
    description, shown as written (the docstrings line their examples up by hand)."""
    return argparse.ArgumentParser(prog=f"fleet {command}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
