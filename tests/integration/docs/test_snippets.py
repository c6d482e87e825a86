"""Every ```sh and ```python snippet of Getting started and the how-to pages runs against the real
stack, in page order, as a reader would paste it: a renamed flag or a changed answer fails here,
not in a reader's terminal. Shell snippets of one page share their variables (a key made in one
is used in the next). `localhost:8080` is this test's own gateway, on a free port.

Snippets marked `<!-- not-run: reason -->` are reported as skipped, with their reason."""

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.client import FleetClient
from tests.integration.conftest import MODEL, Process
from tests.integration.docs.snippets import Snippet, all_snippets
from tests.integration.gateway.gateway_harness import free_port
from tests.paths import REPO_ROOT

SNIPPETS = all_snippets()
PAGES = sorted({snippet.page for snippet in SNIPPETS if snippet.not_run is None})
GATEWAY_ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):8080\b")
SNIPPET_TIMEOUT_S = 120
SCALED = re.compile(r"\bfleet scale ([\w.-]+) --workers [1-9]")


@pytest.fixture(scope="module")
async def gateway_port(tmp_path_factory: pytest.TempPathFactory, stack: object) -> Iterator[int]:
    """A worker of minilm-embed and a gateway, as the pages start them, serving before any snippet runs."""
    logs = tmp_path_factory.mktemp("docs-fleet")
    port = free_port()
    worker = Process(["-m", "workers.main"], {"FLEET_MODEL": MODEL, "FLEET_WORKER_ID": "docs-snippets",
                                              "FLEET_SESSION_TIMEOUT_MS": "6000", "FLEET_MAX_QUEUE_DELAY_MS": "10"},
                     "ready:", logs / "worker.log")
    try:
        gateway = Process(["-m", "gateway.main"], {"FLEET_PORT": str(port)}, "gateway listening", logs / "gateway.log")
    except Exception:
        worker.stop()
        raise
    try:
        async with FleetClient() as client:  # the worker owns the partitions: the snippets' requests get answers
            assert (await client.infer(MODEL, "warm up", timeout=60)).status.value == "ok"
        yield port
    finally:
        gateway.stop()
        worker.stop()


def environment(port: int) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}", "FLEET_PORT": str(port)}


def run(command: list[str], port: int, output: Path) -> tuple[int, str, str]:
    """Run a snippet in a session of its own, its output to files: what it leaves running in the
    background (a `fleet-gateway &`) neither holds a pipe open nor outlives it."""
    out, err = output.with_suffix(".out"), output.with_suffix(".err")
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=environment(port), stdout=stdout, stderr=stderr,
                                   start_new_session=True)
        try:
            code = process.wait(timeout=SNIPPET_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    return code, out.read_text(), err.read_text()


def run_shell(snippet: Snippet, state: Path, port: int) -> tuple[int, str, str]:
    code = GATEWAY_ADDRESS.sub(f"127.0.0.1:{port}", snippet.code)
    script = (f"set -eo pipefail\nset -a\n[ -f {state} ] && source {state}\n{code}\n"
              f"export -p > {state}\n")
    return run(["bash", "-c", script], port, state.parent / f"snippet_{snippet.line}")


def run_python(snippet: Snippet, folder: Path, port: int) -> tuple[int, str, str]:
    program = folder / f"snippet_{snippet.line}.py"
    program.write_text(GATEWAY_ADDRESS.sub(f"127.0.0.1:{port}", snippet.code), encoding="utf-8")
    return run([sys.executable, str(program)], port, program)


def scale_down(snippets: list[Snippet], port: int, folder: Path) -> None:
    """Local workers a page started with `fleet scale` run detached: stop them after the page."""
    for model in sorted({model for snippet in snippets for model in SCALED.findall(snippet.code)}):
        run(["fleet", "scale", model, "--workers", "0"], port, folder / f"scale-down-{model}")


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_snippets_run(page: str, gateway_port: int, tmp_path: Path) -> None:
    state = tmp_path / "shell-state"
    snippets = [s for s in SNIPPETS if s.page == page and s.not_run is None]
    try:
        for snippet in snippets:
            code, stdout, stderr = (run_shell(snippet, state, gateway_port) if snippet.language == "sh"
                                    else run_python(snippet, tmp_path, gateway_port))
            print(f"--- {snippet.name}\n{stdout}")
            assert code == 0 and "Traceback" not in stderr, (
                f"{snippet.name} ({snippet.language}) failed with {code}:\n{snippet.code}\n"
                f"stdout:\n{stdout[-2000:]}\nstderr:\n{stderr[-3000:]}")
    finally:
        scale_down(snippets, gateway_port, tmp_path)
    assert snippets


@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if s.not_run is not None], ids=lambda s: s.name)
def test_snippets_that_cannot_run_here_say_why(snippet: Snippet) -> None:
    assert len(snippet.not_run or "") > 20, f"{snippet.name}: say why it cannot run here, and what checks it instead"
    pytest.skip(f"{snippet.name} not run: {snippet.not_run}")
