"""Version pointers and the rollout controller against the real Redis (no worker, no Kafka).

Traffic is simulated by writing the per-version stats the workers would write (through the
real `VersionStatsRecorder`), split by the live rollout percentage, and shadow comparisons
are written straight into the shadow stats hash.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import fsspec  # type: ignore[import-untyped]
import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from fleet.commands import models as models_cli, rollout as rollout_cli
from common.settings import FleetSettings
from schemas.names import shadow_stats_key, version_stats_key, versions_audit_stream, versions_key
from models.registry import (
    AccuracyCheck,
    ModelManifest,
    ModelNotFound,
    ModelRegistry,
    ModelSource,
    OutputSpec,
    TensorSpec,
    hash_files,
)
from versions.pointers import PointerConflict, PointerError, RolloutState, VersionPointers
from versions.rollout import RolloutController, RolloutEvent, read_report
from versions.rollout_gates import RolloutPlan
from versions.stats import VersionStatsRecorder

STABLE = "{model}-20260101-001"
CANDIDATE = "{model}-20260102-001"
FAST_PLAN = RolloutPlan(min_stage_s=0.2, shadow_min_s=0.2, shadow_min_compared=100, min_stage_requests=20)
POLL_S = 0.05


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(FleetSettings().redis_url)
    try:
        await client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Redis does not answer ({exc}); start it with `scripts/stack up`")
    yield client
    await client.aclose()


@pytest.fixture
async def model(redis: Redis) -> AsyncIterator[str]:
    name = f"rt-{uuid.uuid4().hex[:10]}"
    yield name
    keys = [key async for key in redis.scan_iter(match=f"fleet:*{name}*")]
    if keys:
        await redis.delete(*keys)


def stage_version(root: Path, name: str, version_id: str, parent: str | None = None,
                  with_manifest: bool = False) -> ModelManifest:
    """Tiny fake artifacts in `root/<version_id>/` (not registered); `with_manifest` also writes manifest.json."""
    folder = root / version_id
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"not really onnx " + version_id.encode())
    (folder / "tokenizer.json").write_text('{"fake": true}')
    manifest = ModelManifest(
        id=version_id, name=name, created=datetime(2026, 1, 1, tzinfo=UTC), precision="fp32", parent=parent,
        source=ModelSource(package="fake", package_version="0", base_model="fake"),
        files=hash_files(folder, ["model.onnx", "tokenizer.json"]), onnx_file="model.onnx",
        tokenizer_file="tokenizer.json", max_length=16,
        inputs=(TensorSpec(name="input_ids", dtype="int64", shape=("batch", "sequence")),),
        outputs=(OutputSpec(name="embedding", dtype="float32", shape=("batch", 4), normalized=True),),
        check=AccuracyCheck.evaluate(name="fake", metric="cosine", value=1.0, threshold=0.99, comparison=">="),
    )
    if with_manifest:
        (folder / "manifest.json").write_text(manifest.model_dump_json(indent=2))
    return manifest


async def traffic(redis: Redis, model: str, stop: asyncio.Event, *, candidate_error_rate: float,
                  per_tick: int = 200) -> None:
    """Workers' stats writes: each tick, `per_tick` requests split by the live percent."""
    pointers = VersionPointers(redis, model)
    recorder = VersionStatsRecorder(redis, model)
    sent_errors = 0.0
    while not stop.is_set():
        state = await pointers.get()
        if state.stable is not None:
            to_candidate = round(per_tick * state.percent / 100) if state.candidate else 0
            if to_candidate:
                sent_errors += to_candidate * candidate_error_rate
                errors = int(sent_errors)
                sent_errors -= errors
                assert state.candidate is not None
                await recorder.record(state.candidate, to_candidate - errors, errors, [12.0] * to_candidate)
            if per_tick - to_candidate:
                await recorder.record(state.stable, per_tick - to_candidate, 0, [10.0] * (per_tick - to_candidate))
        await asyncio.sleep(0.02)


async def started(redis: Redis, model: str, plan: RolloutPlan = FAST_PLAN, agreed: int = 500,
                  events: list[RolloutEvent] | None = None, cosine_sum: float = 499.0) -> RolloutController:
    pointers = VersionPointers(redis, model)
    await pointers.set_stable(STABLE.format(model=model), "tester@host", "baseline")
    await redis.hset(shadow_stats_key(model, CANDIDATE.format(model=model)),
                     mapping={"compared": 500, "agreed": agreed, "cosine_sum": cosine_sum})
    controller = RolloutController(redis, model, plan, on_event=(events.append if events is not None else None))
    await controller.start(CANDIDATE.format(model=model), "tester@host")
    return controller


async def test_every_pointer_change_is_audited_with_actor_and_time(redis: Redis, model: str, tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    stable, candidate = STABLE.format(model=model), CANDIDATE.format(model=model)
    for version in (stable, candidate):
        registry.register(stage_version(tmp_path / model, model, version))  # staged in place
    pointers = VersionPointers(redis, model, registry)
    with pytest.raises(ModelNotFound, match="no version"):
        await pointers.set_stable(f"{model}-20260103-009", "alice@box", "typo")
    with pytest.raises(PointerError, match="no stable version"):
        await pointers.set_candidate(candidate, "alice@box", "too early")
    before_ms = int(time.time() * 1000)
    await pointers.set_stable(stable, "alice@box", "first stable")
    await pointers.set_candidate(candidate, "bob@box", "try the new one")
    await pointers.set_rollout(RolloutState.canary, 0, 1.0, "bob@box", "one percent")
    await pointers.promote("carol@box", "looks good")
    state = await pointers.rollback("dave@box", "it was not")
    assert (state.stable, state.candidate, state.previous, state.state) == (stable, None, None, RolloutState.rolled_back)
    history = await pointers.history(10)
    assert [e.action for e in history] == ["set-stable", "set-candidate", "rollout-canary", "promote", "rollback"]
    assert [e.actor for e in history] == ["alice@box", "bob@box", "bob@box", "carol@box", "dave@box"]
    assert all(before_ms <= e.time_ms <= int(time.time() * 1000) for e in history)
    assert history[0].before == {} and history[0].after["stable"] == stable
    assert history[3].after["stable"] == candidate and history[3].after["previous"] == stable
    assert history[4].reason == "it was not" and history[4].after["stable"] == stable
    raw = await redis.hgetall(versions_key(model))
    assert raw[b"state"] == b"rolled_back" and raw[b"actor"] == b"dave@box" and b"candidate" not in raw


async def test_concurrent_writers_never_lose_an_update(redis: Redis, model: str) -> None:
    clients = [Redis.from_url(FleetSettings().redis_url) for _ in range(8)]
    try:
        writers = [VersionPointers(client, model) for client in clients]
        versions = [f"{model}-20260101-{n:03d}" for n in range(1, 41)]
        await asyncio.gather(*(writers[n % 8].set_stable(v, f"w{n}", "race") for n, v in enumerate(versions)))
        history = await writers[0].history(100)
        assert len(history) == 40
        # Each write saw the one before it: the audit log is an unbroken chain, nothing overwritten blind.
        for earlier, later in zip(history, history[1:]):
            assert later.before == earlier.after
        final = await writers[0].get()
        assert final.stable == history[-1].after["stable"] and final.previous == history[-1].before["stable"]

        # The controller's conditional write loses to an operator's pause instead of undoing it.
        await writers[0].set_candidate(f"{model}-20260102-001", "op", "go")
        with pytest.raises(PointerError, match="in progress"):
            await writers[3].set_stable(f"{model}-20260101-001", "op", "not now")
        await writers[0].set_rollout(RolloutState.canary, 0, 1.0, "op", "stage 1")
        await writers[1].pause("op", "hold on")
        with pytest.raises(PointerConflict):
            await writers[2].set_rollout(RolloutState.canary, 1, 5.0, "rollout-controller", "next",
                                         expect_states={RolloutState.canary})
        assert (await writers[0].get()).state == RolloutState.paused
    finally:
        for client in clients:
            await client.aclose()


async def test_candidate_with_errors_rolls_back_by_itself(redis: Redis, model: str) -> None:
    controller = await started(redis, model)
    stop = asyncio.Event()
    load = asyncio.create_task(traffic(redis, model, stop, candidate_error_rate=0.2))
    try:
        outcome = await asyncio.wait_for(controller.run(poll_s=POLL_S), 20)
    finally:
        stop.set()
        await load
    assert outcome.result == "rolled_back" and not outcome.by_operator
    # The stage window need not start on a tick boundary: the rate is ~20%, not exactly.
    match = re.fullmatch(r"error_rate gate: error rate (\d+\.\d)% > 1\.0% \(stable 0\.0%\) at stage 1%", outcome.reason)
    assert match is not None and 15 <= float(match.group(1)) <= 25, outcome
    state = await controller.pointers.get()
    assert (state.state, state.candidate, state.percent) == (RolloutState.rolled_back, None, 0.0)
    assert state.stable == STABLE.format(model=model)
    last = (await controller.pointers.history(1))[0]
    assert last.actor == "rollout-controller" and outcome.reason in last.reason
    assert await read_report(redis, model) is None


async def test_clean_candidate_reaches_100_and_becomes_stable(redis: Redis, model: str) -> None:
    events: list[RolloutEvent] = []
    controller = await started(redis, model, events=events)
    stop = asyncio.Event()
    load = asyncio.create_task(traffic(redis, model, stop, candidate_error_rate=0.0))
    try:
        outcome = await asyncio.wait_for(controller.run(poll_s=POLL_S), 30)
    finally:
        stop.set()
        await load
    assert outcome.result == "promoted", outcome
    state = await controller.pointers.get()
    assert (state.stable, state.previous, state.candidate) == (CANDIDATE.format(model=model),
                                                               STABLE.format(model=model), None)
    assert state.state == RolloutState.promoted
    history = await controller.pointers.history(20)
    stages = [float(e.after["percent"]) for e in history if e.action == "rollout-canary"]
    assert stages == [1.0, 5.0, 20.0, 50.0, 100.0]
    assert history[-1].action == "promote" and history[-1].actor == "rollout-controller"
    assert [e.state.stage for e in events if e.kind == "advanced"] == [0, 1, 2, 3, 4]
    stats = await redis.hgetall(version_stats_key(model, CANDIDATE.format(model=model)))
    # 12 ms as candidate (bucket le_15); after the promotion, 10 ms as the new stable (le_10).
    assert int(stats[b"le_15"]) > 0 and int(stats[b"le_15"]) + int(stats.get(b"le_10", 0)) == int(stats[b"requests"])
    assert b"errors" not in stats


async def test_low_shadow_agreement_rolls_back_before_any_traffic(redis: Redis, model: str) -> None:
    controller = await started(redis, model, agreed=400, cosine_sum=490.0)
    outcome = await asyncio.wait_for(controller.run(poll_s=POLL_S), 10)
    assert outcome.result == "rolled_back"
    # An embedding model's agreement is its mean cosine (a classifier's: labels that match).
    assert outcome.reason == "agreement gate: shadow mean cosine 0.9800 < 0.9900 over 500 compared at shadow"
    assert not any(e.action == "rollout-canary" for e in await controller.pointers.history(10))


async def test_pause_holds_the_stage_and_operator_rollback_ends_the_run(redis: Redis, model: str) -> None:
    controller = await started(redis, model)
    pointers = controller.pointers
    stop = asyncio.Event()
    load = asyncio.create_task(traffic(redis, model, stop, candidate_error_rate=0.0))
    run = asyncio.create_task(controller.run(poll_s=POLL_S))
    try:
        while (await pointers.get()).stage < 0:
            await asyncio.sleep(0.02)
        paused = await pointers.pause("op@box", "looking at a dashboard")
        await asyncio.sleep(1.0)  # five times the stage's minimum time
        held = await pointers.get()
        assert (held.state, held.stage, held.percent) == (RolloutState.paused, paused.stage, paused.percent)
        assert not run.done()
        await pointers.resume("op@box", "fine")
        while (await pointers.get()).stage <= paused.stage:
            await asyncio.sleep(0.02)
        await pointers.rollback("op@box", "changed my mind")
        outcome = await asyncio.wait_for(run, 10)
    finally:
        stop.set()
        await load
        run.cancel()
    assert outcome.result == "rolled_back" and outcome.by_operator
    assert outcome.reason == "rolled back by op@box: changed my mind"
    audit = await redis.xrange(versions_audit_stream(model))
    actions = [fields[b"action"].decode() for _, fields in audit]
    assert actions.index("pause") < actions.index("resume") < actions.index("rollback")
    assert json.loads(audit[-1][1][b"before"])["state"] == "canary"


# --- the CLI commands (sync tests: each command runs its own event loop) ---

@pytest.fixture
def cli_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fresh model name and an empty registry folder the CLI uses (FLEET_MODEL_DIR)."""
    name = f"rt-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("FLEET_MODEL_DIR", str(tmp_path / "registry"))
    yield name, tmp_path
    client = SyncRedis.from_url(FleetSettings().redis_url)
    keys = list(client.scan_iter(match=f"fleet:*{name}*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_models_register_list_set_stable_history(cli_model: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    name, tmp_path = cli_model
    stable, candidate = STABLE.format(model=name), CANDIDATE.format(model=name)
    stage_version(tmp_path / "src", name, stable, with_manifest=True)
    assert models_cli.main(["register", str(tmp_path / "src" / stable)]) == 0
    # An object-store URL through fsspec (its in-memory filesystem stands in for s3://).
    remote = stage_version(tmp_path / "src", name, candidate, parent=stable, with_manifest=True)
    memory = fsspec.filesystem("memory")
    for filename in [*remote.files, "manifest.json"]:
        memory.pipe_file(f"/{name}/{candidate}/{filename}", (tmp_path / "src" / candidate / filename).read_bytes())
    assert models_cli.main(["register", f"memory://{name}/{candidate}"]) == 0
    assert (tmp_path / "registry" / name / candidate / "manifest.json").is_file()
    # A tampered artifact is refused and leaves nothing behind.
    bad = stage_version(tmp_path / "src", name, f"{name}-20260103-001", with_manifest=True)
    (tmp_path / "src" / bad.id / "model.onnx").write_bytes(b"tampered")
    assert models_cli.main(["register", str(tmp_path / "src" / bad.id)]) == 1
    assert not (tmp_path / "registry" / name / bad.id).exists()
    assert "sha256" in capsys.readouterr().err

    assert models_cli.main(["set-stable", name, stable, "--reason", "first", "--actor", "eve@box"]) == 0
    assert models_cli.main(["list", name]) == 0
    listing = capsys.readouterr().out
    stable_row = next(line for line in listing.splitlines() if line.startswith(stable))
    assert stable_row.rstrip().endswith("stable") and "fp32" in stable_row
    assert candidate in listing and bad.id not in listing
    assert models_cli.main(["show", candidate]) == 0
    shown = capsys.readouterr().out
    assert f"parent               {stable}" in shown and f"file model.onnx      {remote.files['model.onnx'][:12]}" in shown
    assert models_cli.main(["history", name]) == 0
    history = capsys.readouterr().out
    assert "eve@box" in history and "set-stable" in history and "first" in history

    # Retiring: a version that serves cannot go alone; another one, or the whole model, can (audited).
    assert models_cli.main(["retire", name, stable, "--reason", "old"]) == 1
    assert "serves now" in capsys.readouterr().err
    assert models_cli.main(["retire", name, candidate, "--reason", "never shipped", "--actor", "eve@box"]) == 0
    assert models_cli.main(["list", name]) == 0
    listing = capsys.readouterr().out
    assert f"{name}  (served)" in listing
    assert next(line for line in listing.splitlines() if line.startswith(candidate)).rstrip().endswith("retired")
    assert models_cli.main(["retire", name, "--reason", "replaced", "--actor", "eve@box"]) == 0
    assert "set-stable" in capsys.readouterr().out  # how to bring it back
    assert models_cli.main(["list", name]) == 0
    assert f"{name}  (retired)" in capsys.readouterr().out
    assert models_cli.main(["history", name]) == 0
    history = capsys.readouterr().out
    assert f"retire {candidate}" in history and "replaced" in history
    assert models_cli.main(["set-stable", name, stable, "--reason", "back"]) == 0
    assert models_cli.main(["list", name]) == 0
    assert f"{name}  (served)" in capsys.readouterr().out


def test_rollout_cli_detach_status_pause_rollback(cli_model: tuple[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    name, tmp_path = cli_model
    for version in (STABLE.format(model=name), CANDIDATE.format(model=name)):
        stage_version(tmp_path / "src", name, version, with_manifest=True)
        assert models_cli.main(["register", str(tmp_path / "src" / version)]) == 0
    assert models_cli.main(["set-stable", name, STABLE.format(model=name)]) == 0
    assert rollout_cli.main(["start", name, CANDIDATE.format(model=name), "--detach", "--stages", "2,100",
                             "--actor", "ops@box"]) == 0
    assert rollout_cli.main(["pause", name, "--actor", "ops@box", "--reason", "lunch"]) == 0
    assert rollout_cli.main(["pause", name]) == 1  # already paused: refused with a reason
    capsys.readouterr()
    assert rollout_cli.main(["status", name]) == 0
    status = capsys.readouterr().out
    assert "state        paused" in status and f"candidate    {CANDIDATE.format(model=name)}" in status
    assert "ops@box" in status and "lunch" in status
    stored = SyncRedis.from_url(FleetSettings().redis_url).hget(versions_key(name), "plan")
    assert stored is not None and json.loads(stored)["stages"] == [2.0, 100.0]
    assert rollout_cli.main(["rollback", name, "--reason", "not today"]) == 0
    assert rollout_cli.main(["run", name]) == 1  # nothing left to drive
    assert "no rollout in progress" in capsys.readouterr().err
