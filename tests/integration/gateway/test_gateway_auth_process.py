"""The gateway and `fleet keys` as real processes: a key is printed once by `create` and appears
nowhere else, not in the CLI's other output nor in the gateway's log at DEBUG; switching
authentication off is announced in the log and in /readyz."""

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from common.auth_keys import key_digest
from tests.integration.conftest import Process
from fleet.ports import free_port

MODEL = "gw-auth-process"
TENANT = "leak-check"


def fleet_keys(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleet.cli", "keys", *words], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "FLEET_LOG_LEVEL": "DEBUG"})


def start_gateway(tmp_path: Path, **env: str) -> tuple[Process, str]:
    port = free_port()
    process = Process(["-m", "gateway.main"], {"FLEET_PORT": str(port), "FLEET_MODELS": f'["{MODEL}"]',
                                               "FLEET_LOG_LEVEL": "DEBUG", **env},
                      "gateway listening", tmp_path / "gateway.log")
    return process, f"http://127.0.0.1:{port}"


def test_a_key_is_shown_once_and_never_logged(tmp_path: Path) -> None:
    created = fleet_keys("create", "--tenant", TENANT)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    key_id, secret = key.split("_", 2)[1:]
    process, url = start_gateway(tmp_path)
    try:
        with httpx.Client(base_url=url, timeout=10) as http:
            for headers in ({"authorization": f"Bearer {key}"}, {"x-api-key": key}, {"authorization": f"Bearer {key}x"},
                            {"authorization": f"Token {key}"}):
                http.post(f"/v1/models/{MODEL}/requests", json={"text": "hi", "timeout_ms": 500}, headers=headers)
                http.get(f"/v1/results/{'ab' * 16}", headers=headers)
            listed = fleet_keys("list", "--tenant", TENANT)
            revoked = fleet_keys("revoke", key_id)
            time.sleep(0.6)
            after = http.get(f"/v1/results/{'ab' * 16}", headers={"authorization": f"Bearer {key}"})
    finally:
        process.stop()
    assert after.status_code == 401
    assert key_id in listed.stdout and TENANT in listed.stdout and key_id in revoked.stdout
    log = process.log_path.read_text(errors="replace")
    assert "gateway listening" in log
    said = {"create (stderr)": created.stderr, "list": listed.stdout + listed.stderr,
            "revoke": revoked.stdout + revoked.stderr, "gateway log": log}
    for where, text in said.items():
        for secret_part in (key, secret, key_digest(key)):
            assert secret_part not in text, f"{where} shows the key (or its hash)"
    assert created.stdout.count(key) == 1


def test_auth_switched_off_is_announced_in_the_log_and_readyz(tmp_path: Path) -> None:
    process, url = start_gateway(tmp_path, FLEET_AUTH_REQUIRED="false")
    try:
        ready = httpx.get(f"{url}/readyz", timeout=10).json()
        open_door = httpx.get(f"{url}/v1/results/{'ab' * 16}", timeout=10)
    finally:
        process.stop()
    assert ready["auth"] == "disabled" and open_door.status_code == 404
    warning = [line for line in process.log_path.read_text().splitlines() if "AUTHENTICATION IS OFF" in line]
    assert warning and "WARNING" in warning[0]


def test_an_unusable_keys_file_stops_the_gateway_at_start(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("fk_a_secret_someone_pasted acme\n")
    port = free_port()
    process = Process(["-m", "gateway.main"], {"FLEET_PORT": str(port), "FLEET_AUTH_KEYS_FILE": str(keys_file)},
                      "cannot start", tmp_path / "gateway.log")
    code = process.popen.wait(timeout=15)
    process.stop()
    log = process.log_path.read_text()
    assert code != 0 and f"{keys_file}:1" in log and "fk_a_secret" not in log
