"""Every ```sh and ```python snippet of Getting started and the how-to pages runs against the real
stack, in page order, as a reader would paste it: a renamed flag or a changed answer fails here,
not in a reader's terminal. Shell snippets of one page share their variables (a key made in one
is used in the next). `localhost:8080` is this test's own gateway and `localhost:8081` its gRPC
port, both on free ports; it accepts the models the pages name. Models the pages import are
registered in a registry of this test's own (the built models symlinked into it), so a run leaves
nothing in `.fleet/models`.

Snippets marked `<!-- not-run: reason -->` are reported as skipped, with their reason."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.client import FleetClient
from common.settings import FleetSettings
from tests.integration.conftest import Process
from tests.integration.docs.snippets import Snippet, all_snippets
from tests.integration.gateway.gateway_harness import free_port
from tests.paths import REPO_ROOT

SNIPPETS = all_snippets()
PAGES = sorted({snippet.page for snippet in SNIPPETS if snippet.not_run is None})
GATEWAY_ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):8080\b")
GRPC_ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):8081\b")
BUILT_MODELS = ("minilm-embed", "faq-intent", "faq-intent-multilingual")  # what `scripts/build-models` makes; the workers below serve them
PAGE_MODELS = ("support-intents", "passage-ranker", "churn")  # what how-to/bring-your-own-model.md imports
SNIPPET_TIMEOUT_S = 120
SCALED = re.compile(r"\bfleet scale ([\w.-]+) --workers [1-9]")


@dataclass(frozen=True)
class DocsFleet:
    port: int
    grpc_port: int
    model_dir: Path

    def environment(self) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        return {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                "FLEET_PORT": str(self.port), "FLEET_MODEL_DIR": str(self.model_dir)}

    def addresses(self, code: str) -> str:
        return GRPC_ADDRESS.sub(f"127.0.0.1:{self.grpc_port}", GATEWAY_ADDRESS.sub(f"127.0.0.1:{self.port}", code))


def own_registry(folder: Path) -> Path:
    """A registry holding the built models (symlinked, as the benchmarks do) and whatever the pages import."""
    built = FleetSettings().registry_dir
    for model in BUILT_MODELS:
        (folder / model).symlink_to((built / model).resolve(), target_is_directory=True)
    return folder


@pytest.fixture(scope="module")
async def docs_fleet(tmp_path_factory: pytest.TempPathFactory, stack: object) -> AsyncIterator[DocsFleet]:
    """Workers of the built models and a gateway (REST and gRPC), as the pages start them, serving
    before any snippet runs."""
    logs = tmp_path_factory.mktemp("docs-fleet")
    fleet = DocsFleet(free_port(), free_port(), own_registry(tmp_path_factory.mktemp("docs-models")))
    # console.md replays every invalid_input letter of minilm-embed: only the pages' own (which keep their
    # original bytes, see below), never a masked one an earlier test left, whatever order tests ran in.
    subprocess.run([str(Path(sys.executable).parent / "fleet"), "dlq", "purge", "--yes", "--reason",
                    "the docs test starts from an empty DLQ"], cwd=REPO_ROOT, check=True, capture_output=True)
    started: list[Process] = []
    try:
        for model in BUILT_MODELS:
            started.append(Process(["-m", "workers.main"], {
                "FLEET_MODEL": model, "FLEET_WORKER_ID": f"docs-{model}", "FLEET_MODEL_DIR": str(fleet.model_dir),
                "FLEET_SESSION_TIMEOUT_MS": "6000", "FLEET_MAX_QUEUE_DELAY_MS": "10",
                # console.md replays the letters batch-jobs.md's refused line made; a masked letter cannot be
                "FLEET_DLQ_KEEP_ORIGINAL": "true"}, "ready:", logs / f"{model}.log"))
        started.append(Process(["-m", "gateway.main"], {
            "FLEET_PORT": str(fleet.port), "FLEET_GRPC_PORT": str(fleet.grpc_port),
            "FLEET_MODELS": json.dumps([*BUILT_MODELS, *PAGE_MODELS])}, "gateway listening", logs / "gateway.log"))
        async with FleetClient() as client:  # the workers own the partitions: the snippets' requests get answers
            for model in BUILT_MODELS:
                assert (await client.infer(model, "warm up", timeout=60)).status.value == "ok"
        yield fleet
    finally:
        for process in reversed(started):
            process.stop()


def run(command: list[str], fleet: DocsFleet, output: Path) -> tuple[int, str, str]:
    """Run a snippet in a session of its own, its output to files: what it leaves running in the
    background (a `fleet-gateway &`) neither holds a pipe open nor outlives it."""
    out, err = output.with_suffix(".out"), output.with_suffix(".err")
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=fleet.environment(), stdout=stdout, stderr=stderr,
                                   start_new_session=True)
        try:
            code = process.wait(timeout=SNIPPET_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    return code, out.read_text(), err.read_text()


def run_shell(snippet: Snippet, state: Path, fleet: DocsFleet) -> tuple[int, str, str]:
    script = (f"set -eo pipefail\nset -a\n[ -f {state} ] && source {state}\n{fleet.addresses(snippet.code)}\n"
              f"export -p > {state}\n")
    return run(["bash", "-c", script], fleet, state.parent / f"snippet_{snippet.line}")


def run_python(snippet: Snippet, state: Path, fleet: DocsFleet) -> tuple[int, str, str]:
    """Run from the page's shell, as a reader would: it sees what the shell snippets exported (`KEY`)."""
    program = state.parent / f"snippet_{snippet.line}.py"
    program.write_text(fleet.addresses(snippet.code), encoding="utf-8")
    script = f"set -a\n[ -f {state} ] && source {state}\nexec {sys.executable} {program}\n"
    return run(["bash", "-c", script], fleet, program)


def scale_down(snippets: list[Snippet], fleet: DocsFleet, folder: Path) -> None:
    """Local workers a page started with `fleet scale` run detached: stop them after the page."""
    for model in sorted({model for snippet in snippets for model in SCALED.findall(snippet.code)}):
        run(["fleet", "scale", model, "--workers", "0"], fleet, folder / f"scale-down-{model}")


def retire_page_models(snippets: list[Snippet], fleet: DocsFleet, folder: Path) -> None:
    """The models a page imported leave service with the page, as an operator retires a demo: the
    gateway is then ready again for the next page (it is ready when every model it serves is)."""
    for model in sorted({model for model in PAGE_MODELS for snippet in snippets if model in snippet.code}):
        run(["fleet", "models", "retire", model, "--reason", "the docs page that imported it is over"], fleet,
            folder / f"retire-{model}")


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_snippets_run(page: str, docs_fleet: DocsFleet, tmp_path: Path) -> None:
    state = tmp_path / "shell-state"
    snippets = [s for s in SNIPPETS if s.page == page and s.not_run is None]
    try:
        for snippet in snippets:
            code, stdout, stderr = (run_shell(snippet, state, docs_fleet) if snippet.language == "sh"
                                    else run_python(snippet, state, docs_fleet))
            print(f"--- {snippet.name}\n{stdout}")
            assert code == 0 and "Traceback" not in stderr, (
                f"{snippet.name} ({snippet.language}) failed with {code}:\n{snippet.code}\n"
                f"stdout:\n{stdout[-2000:]}\nstderr:\n{stderr[-3000:]}")
    finally:
        scale_down(snippets, docs_fleet, tmp_path)
        retire_page_models(snippets, docs_fleet, tmp_path)
    assert snippets


@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if s.not_run is not None], ids=lambda s: s.name)
def test_snippets_that_cannot_run_here_say_why(snippet: Snippet) -> None:
    assert len(snippet.not_run or "") > 20, f"{snippet.name}: say why it cannot run here, and what checks it instead"
    pytest.skip(f"{snippet.name} not run: {snippet.not_run}")
