"""The CLI reference, read from the argparse parsers themselves.

Each program's entry point is called with its parsing intercepted: the first `parse_args` or
`parse_known_args` it makes hands over the parser it built and stops it there, before it does
anything. Programs are found where users find them: `fleet` and the commands it delegates to,
the console scripts of pyproject.toml, and the `python -m` modules that scripts/ runs."""

import argparse
import importlib
import importlib.util
import inspect
import re
import sys
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from markdown_table import code, table

# A line of a script in scripts/ that runs one of our modules, and the `case` word it sits under, if any.
SCRIPT_MODULE = re.compile(r"^\s*(?:([\w-]+)\)\s)?[^\n]*?-m ((?:fleet|models|workers|gateway|versions|common)[\w.]*)",
                           re.MULTILINE)


class Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


@contextmanager
def intercepted() -> Iterator[None]:
    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args

    def capture(self: argparse.ArgumentParser, *_: object, **__: object) -> None:
        raise Captured(self)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign, assignment]
    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = saved  # type: ignore[method-assign]


def parser_of(title: str, entry: Callable[..., object]) -> argparse.ArgumentParser:
    module = inspect.getmodule(entry)
    if module is None or "parse_args" not in inspect.getsource(module) and "parse_known_args" not in inspect.getsource(module):
        # A program that parses no arguments would run if called: it is described, not run.
        return argparse.ArgumentParser(prog=title, description=(module.__doc__ or "").strip().split("\n")[0] if module else "")
    saved_argv = sys.argv
    sys.argv = [title]  # a parser without a prog names itself after argv[0]
    with intercepted():
        try:
            entry([]) if inspect.signature(entry).parameters else entry()
        except Captured as captured:
            return captured.parser
        finally:
            sys.argv = saved_argv
    raise RuntimeError(f"{entry.__module__}.{entry.__name__} returned without parsing arguments")


def entry_point(target: str) -> Callable[..., object]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function or "main")


def programs(root: Path) -> list[tuple[str, Callable[..., object]]]:
    """(how a user runs it, its entry point), each program once."""
    from fleet import cli

    found: list[tuple[str, Callable[..., object]]] = [("fleet", lambda: cli.parser().parse_args())]
    found += [(f"fleet {name}", entry_point(target)) for name, (target, _) in cli.DELEGATES.items()]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    found += [(name, entry_point(target)) for name, target in scripts.items() if name != "fleet"]
    for script in sorted((root / "scripts").iterdir()):
        for case, module in SCRIPT_MODULE.findall(script.read_text(encoding="utf-8")):
            entry = entry_point(main_module(module))
            if all(entry is not known for _, known in found):
                found.append((f"scripts/{script.name} {case}".rstrip(), entry))
    return found


def main_module(module: str) -> str:
    """`python -m package` runs package/__main__.py; one that only calls another module's `main`
    (and would run it if imported) names that module instead."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return module
    source = Path(spec.submodule_search_locations[0], "__main__.py").read_text(encoding="utf-8")
    delegate = re.search(r"^from ([\w.]+) import main$", source, re.MULTILINE)
    return delegate.group(1) if delegate else f"{module}.__main__"


def subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = ", ".join(action.option_strings) or action.dest
        default = "" if action.default in (None, argparse.SUPPRESS, False) or action.option_strings == [] \
            and action.default is None else action.default
        help_text = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
        rows.append((code(names), code(default), help_text if help_text != argparse.SUPPRESS else ""))
    return rows


def parser_section(title: str, parser: argparse.ArgumentParser, level: int) -> str:
    lines = [f"{'#' * level} {title}", "", "```text", parser.format_usage().strip(), "```"]
    description = (parser.description or "").strip()
    if description:
        lines += ["", "```text", description, "```"] if "\n" in description else ["", description]
    rows = option_rows(parser)
    if rows:
        lines += ["", table(("argument", "default", "help"), rows)]
    # `fleet`'s own entries for the delegated commands are stubs: each command's section is its own parser's.
    from fleet.cli import DELEGATES

    children = [parser_section(f"{title} {name}", child, min(level + 1, 4)) for name, child in subparsers(parser)
                if not (title == "fleet" and name in DELEGATES)]
    return "\n".join(lines) + ("\n\n" + "\n\n".join(children) if children else "")


def cli_page(root: Path) -> str:
    sections = [parser_section(title, parser_of(title, entry), 2) for title, entry in programs(root)]
    intro = ("# Command line\n\nGenerated from the argparse parsers at build time: `fleet` and each command it "
             "runs, the `fleet-worker` and `fleet-gateway` processes, and the modules `scripts/` runs. "
             "Every command also takes `--help`.\n\n")
    return intro + "\n\n".join(sections) + "\n"
