"""The argument parser every tool of the source tree starts from: its usage names the script in
scripts/ that runs it, since these tools are not commands of the installed `fleet`."""

import argparse


def script_parser(script: str, doc: str | None) -> argparse.ArgumentParser:
    """`scripts/<script>`'s parser; its module docstring is the description, shown as written."""
    return argparse.ArgumentParser(prog=f"scripts/{script}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
