"""`scripts/roles`: what each role's install weighs and how long its process takes to start.

For every role of pyproject.toml's extras (the gateway, an ONNX worker, a torch worker, the console)
this installs a checkout's committed tree into an empty virtual environment, prints the size of its
site-packages, and starts the role's process a few times from a neutral folder (never the checkout:
what runs is what was installed), printing the median cold start:

    gateway       spawn `fleet-gateway` -> first 200 from GET /healthz (it listens once Kafka and
                  Redis answer: the local stack's, FLEET_KAFKA_BOOTSTRAP / FLEET_REDIS_URL)
    worker-*      spawn python -> `import workers.main`, the model's newest version loaded by the
                  worker's own loader and one batch run (what a worker does before its health port
                  can say ready; Kafka's group join is left out, it is the broker's time), and
                  whether torch was imported on the way
    console       spawn `fleet console` -> first answer from GET / (the sign-in page)

    scripts/roles                       this checkout's HEAD
    scripts/roles --checkout /work/main --before   a checkout from before the role extras: every
                                        role is the one install it had (`.` or `.[cpu]`)

torch comes from PyPI, whose Linux wheel is the CUDA build (its nvidia-* wheels are most of a torch
install's size); `--torch-index https://download.pytorch.org/whl/cpu` takes the CPU wheel instead, as
compose/Dockerfile does. Needs the network and built models (scripts/build-models).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from fleet.tables import format_table
from fleet_dev.arguments import script_parser

ROOT = Path(__file__).resolve().parents[1]
STARTS = 5
START_TIMEOUT_S = 120.0

# The worker's cold start, run inside the role's venv: the loader a worker uses, one batch, and
# whether torch came along. Prints one JSON line.
WORKER_PROBE = """
import json, sys
import workers.main
from workers.settings import WorkerSettings
from models.loading import ModelLoader
backend = ModelLoader(WorkerSettings().runtime()).load()
backend.infer(["where is my parcel"])
print(json.dumps({"torch": "torch" in sys.modules, "version": backend.manifest.id}))
"""


@dataclass(frozen=True)
class Role:
    name: str
    extras: str  # pyproject.toml's extras after the role extras
    before: str  # the same process's install before them (one install for every role)
    start: str  # "gateway" | "worker" | "console"
    backend: str = "onnxruntime"


ROLES = (
    Role("gateway", "gateway", "", "gateway"),
    Role("worker-onnx", "worker,cpu", "cpu", "worker"),
    Role("worker-torch", "worker,torch,cpu", "cpu", "worker", backend="torch"),
    Role("console", "console", "", "console"),
)


def export_tree(checkout: Path, into: Path) -> Path:
    """The checkout's committed HEAD as plain files (no build output lands in the checkout)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(checkout), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def install(tree: Path, extras: str, venv: Path, torch_index: str | None) -> Path:
    """An empty venv with `tree[extras]` at constraints.txt's versions; its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    target = f"{tree}[{extras}]" if extras else str(tree)
    index = ["--extra-index-url", torch_index] if torch_index else []
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                    "-c", str(tree / "constraints.txt"), *index, target], check=True)
    [site] = (venv / "lib").glob("python3*/site-packages")
    return site


def size_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink()) / 1e6


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True  # an answer (the console's sign-in redirect or 401) is a served request
    except OSError:
        return False


def time_until_served(command: list[str], env: dict[str, str], url: str, cwd: Path) -> float:
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not answers(url):
            if process.poll() is not None or time.perf_counter() - started > START_TIMEOUT_S:
                raise RuntimeError(f"{command[0]} did not serve {url} (exit {process.returncode})")
            time.sleep(0.01)
        return time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(timeout=30)


def start_once(role: Role, venv: Path, env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Seconds from spawn to served, and a note (the worker: whether torch was imported)."""
    bin_dir = venv / "bin"
    port = free_port()
    if role.start == "gateway":
        return time_until_served([str(bin_dir / "fleet-gateway")], {**env, "FLEET_PORT": str(port)},
                                 f"http://127.0.0.1:{port}/healthz", cwd), ""
    if role.start == "console":
        return time_until_served([str(bin_dir / "fleet"), "console", "--port", str(port)], env,
                                 f"http://127.0.0.1:{port}/", cwd), ""
    started = time.perf_counter()
    done = subprocess.run([str(bin_dir / "python"), "-c", WORKER_PROBE], env={**env, "FLEET_BACKEND": role.backend},
                          cwd=cwd, check=True, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    return elapsed, "torch imported" if json.loads(done.stdout.splitlines()[-1])["torch"] else "no torch"


def measure(role: Role, extras: str, tree: Path, scratch: Path, env: dict[str, str],
            torch_index: str | None) -> list[str]:
    venv = scratch / f"venv-{role.name}"
    site = install(tree, extras, venv, torch_index)
    cwd = scratch / "cwd"
    cwd.mkdir(exist_ok=True)
    megabytes = size_mb(site)
    starts = [start_once(role, venv, env, cwd) for _ in range(STARTS)]
    median = statistics.median(seconds for seconds, _ in starts)
    shutil.rmtree(venv)
    return [role.name, f"[{extras}]" if extras else "(base)", f"{megabytes:.0f}", f"{median:.2f}", starts[-1][1]]


def main(argv: list[str] | None = None) -> int:
    parser = script_parser("roles", __doc__)
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout whose HEAD is installed")
    parser.add_argument("--before", action="store_true", help="the checkout predates the role extras")
    parser.add_argument("--roles", default=",".join(role.name for role in ROLES), help="comma-separated roles")
    parser.add_argument("--torch-index", help="an extra package index for torch (PyTorch's CPU wheels)")
    parser.add_argument("--models", type=Path, default=ROOT / ".fleet" / "models", help="the built model registry")
    args = parser.parse_args(argv)
    chosen = [role for role in ROLES if role.name in args.roles.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-roles-") as folder:
        scratch = Path(folder)
        tree = export_tree(args.checkout.resolve(), scratch / "tree")
        env = {**os.environ, "FLEET_HOME": str(scratch / "home"), "FLEET_MODEL_DIR": str(args.models.resolve()),
               "FLEET_AUTH_REQUIRED": "false", "FLEET_CONSOLE_TENANTS": "ops:admin", "FLEET_DEVICE": "cpu"}
        env.pop("PYTHONPATH", None)
        for role in chosen:
            rows.append(measure(role, role.before if args.before else role.extras, tree, scratch, env,
                                args.torch_index))
            print(format_table(["role", "install", "site-packages MB", f"cold start s (median of {STARTS})", "note"],
                               rows[-1:]), flush=True)
    print(format_table(["role", "install", "site-packages MB", f"cold start s (median of {STARTS})", "note"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
