"""`--help` works for `fleet`, every command it delegates to, and every subcommand below those.

In-process through fleet.cli.main, so the test sees what an operator's shell would: the exit
status and the printed usage. The parsers are recorded as they parse (each command builds its
own inside its main), which is how a command's subcommands are found without running it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from fleet import cli

COMMANDS = [*cli.DELEGATES, "topics"]


class HelpRun:
    """Runs `fleet <words> --help`, keeping the parsers that took part, innermost last."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.parsers: list[argparse.ArgumentParser] = []
        parse = argparse.ArgumentParser.parse_known_args

        def recording(parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> object:
            self.parsers.append(parser)
            return parse(parser, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", recording)

    def __call__(self, words: list[str]) -> tuple[str, argparse.ArgumentParser]:
        self.parsers.clear()
        with pytest.raises(SystemExit) as ended:
            cli.main([*words, "--help"])
        out, err = self.capsys.readouterr()
        assert ended.value.code == 0, f"fleet {' '.join(words)} --help exited {ended.value.code}:\n{err}"
        assert out.startswith("usage: "), f"fleet {' '.join(words)} --help printed no usage:\n{out}\n{err}"
        return out, self.parsers[-1]


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    found: list[str] = []
    for action in parser._actions:  # argparse offers no public way to list a parser's subcommands
        if isinstance(action, argparse._SubParsersAction):
            found += list(action.choices)
    return found


def every_help(run: HelpRun, words: list[str]) -> Iterator[list[str]]:
    """`words` and every subcommand path below it, each one's --help run on the way."""
    _, parser = run(words)
    yield words
    for sub in subcommands(parser):
        yield from every_help(run, [*words, sub])


@pytest.fixture
def help_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> HelpRun:
    return HelpRun(monkeypatch, capsys)


def test_fleet_help_lists_every_command(help_run: HelpRun) -> None:
    out, parser = help_run([])
    assert set(subcommands(parser)) == set(COMMANDS)
    for command in COMMANDS:
        assert f"    {command} " in out, f"{command} is missing from `fleet --help`"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_and_subcommand_has_help(help_run: HelpRun, command: str) -> None:
    paths = list(every_help(help_run, [command]))
    assert paths[0] == [command]


def test_subcommands_are_found_where_a_command_has_them(help_run: HelpRun) -> None:
    paths = list(every_help(help_run, ["models"]))
    assert ["models", "set-stable"] in paths and ["models", "history"] in paths


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_names_itself_as_the_operator_types_it(help_run: HelpRun, command: str) -> None:
    out, _ = help_run([command])
    assert out.startswith(f"usage: fleet {command} "), out.splitlines()[0]
