"""A `fleet` command ends with a line and an exit status, not a traceback, when the stack is down."""

from collections.abc import Callable

import pytest
from aiokafka.errors import KafkaConnectionError
from redis.exceptions import ConnectionError as RedisConnectionError

from fleet import cli
from fleet.exits import Exit
from fleet.unreachable import run_command


def raising(exc: BaseException) -> Callable[[], int]:
    def entry() -> int:
        raise exc

    return entry


@pytest.mark.parametrize(("exc", "server"), [(KafkaConnectionError("Unable to bootstrap"), "Kafka"),
                                             (RedisConnectionError("Error 111 connecting"), "Redis")])
def test_an_unreachable_server_is_named_in_one_line(exc: BaseException, server: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command("lag", raising(exc)) == Exit.UNAVAILABLE
    err = capsys.readouterr().err
    assert err.startswith(f"fleet lag: cannot reach {server} at ") and "scripts/stack up" in err
    assert len(err.splitlines()) == 1


def test_ctrl_c_and_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command("rollout", raising(KeyboardInterrupt())) == Exit.INTERRUPTED == 130
    assert run_command("cache", lambda: Exit.ROLLED_BACK) == 3
    assert run_command("keys", lambda: None) == Exit.OK
    with pytest.raises(ValueError):
        run_command("lag", raising(ValueError("a bug stays a traceback")))


def test_lag_against_a_port_nobody_listens_on(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLEET_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    monkeypatch.setenv("FLEET_STARTUP_TIMEOUT_S", "1")  # it waits that long for Kafka first
    with pytest.raises(SystemExit) as ended:
        cli.main(["lag", "--interval", "0.1"])
    assert ended.value.code == Exit.UNAVAILABLE
    assert "cannot reach Kafka at 127.0.0.1:9" in capsys.readouterr().err


def test_a_command_that_may_run_again_waits_out_an_outage(capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[int] = []

    def entry() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise KafkaConnectionError("Unable to bootstrap")
        return Exit.OK

    assert run_command("lag", entry, wait_s=20) == Exit.OK
    assert len(calls) == 3
    assert capsys.readouterr().err.startswith("fleet lag: waiting for Kafka (KafkaConnectionError); ")
    assert cli.waiting_for("lag") > 0 and cli.waiting_for("keys") == 0 == cli.waiting_for("demo")
