"""The checks an import must pass before anything registers.

1. Reference: the graph against the source framework on the same sample inputs: the worst
   absolute difference over every float output (scaled by the outputs' magnitude, 1e-4 for
   values up to 1: the build's FP32 threshold; 1e-5 for an ONNX file edited at import, against
   ONNX Runtime on the file as given) and the agreement of predicted labels (argmax of
   probabilities, or integer label outputs), which must be total.
2. Smoke: batches of 1, 3 and 8 rows run, give one row out per row in, and (FP32) give each row
   what it gets alone: the proof that the task can batch this graph.
3. INT8: the quantised graph's rows point where FP32's do (the build's gate: mean cosine >= 0.98);
   label agreement is recorded next to it (near-tied probabilities may flip).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from models.build.checks import FP32_MAX_ABS_DIFF, check_int8_close_to_fp32
from models.importing.converted import Reference
from models.importing.errors import ImportRefused
from models.importing.samples import Arrays, Samples
from models.registry import AccuracyCheck

SMOKE_BATCHES = (1, 3, 8)
MIN_LABEL_AGREEMENT = 1.0
# Output name -> its shape as the graph file declares it (what the manifest says).
Declared = dict[str, tuple[int | str, ...]]
# Batched rows against the same rows alone: padding and kernel choice move FP32 by ~1e-6.
SMOKE_MAX_ABS_DIFF = 1e-4
# Rows whose L2 norms all lie this close to 1 are unit rows (FP32 rounding moves a norm by ~1e-7).
UNIT_NORM_TOLERANCE = 1e-4


def run(session: ort.InferenceSession, feeds: Arrays) -> Arrays:
    names = [output.name for output in session.get_outputs()]
    try:
        return dict(zip(names, (np.asarray(value) for value in session.run(names, feeds))))
    except Exception as exc:  # ONNX Runtime raises its own exception types for bad shapes and kernels
        shapes = {name: list(array.shape) for name, array in feeds.items()}
        raise ImportRefused(f"the graph fails on inputs {shapes}: {exc}") from exc


def _agreement(ours: npt.NDArray[np.generic], theirs: npt.NDArray[np.generic]) -> float | None:
    """Label agreement of two outputs: integer labels compare as they are, probability rows by argmax."""
    if ours.dtype.kind in "iu" or ours.dtype.kind == "b":
        return float(np.mean(ours.reshape(-1) == theirs.reshape(-1)))
    if ours.ndim >= 2 and ours.shape[-1] > 1:
        return float(np.mean(ours.argmax(axis=-1) == theirs.argmax(axis=-1)))
    return None


def _compare(ours: Arrays, theirs: Arrays, max_abs_diff: float) -> tuple[float, float, float]:
    """(worst abs diff, its threshold, worst label agreement) over the outputs both sides have."""
    worst, scale, agreement = 0.0, 1.0, 1.0
    for name, reference in theirs.items():
        if name not in ours:
            raise ImportRefused(f"the graph has no output {name!r} to compare with the source (has {sorted(ours)})")
        mine = ours[name]
        if mine.size != reference.size:
            raise ImportRefused(f"output {name!r}: the graph gives shape {list(mine.shape)}, the source "
                                f"{list(reference.shape)}")
        reference = reference.reshape(mine.shape)
        if mine.dtype.kind == "f":
            worst = max(worst, float(np.max(np.abs(mine.astype(np.float64) - reference.astype(np.float64)))))
            scale = max(scale, float(np.max(np.abs(reference))))
        label = _agreement(mine, reference)
        agreement = min(agreement, 1.0 if label is None else label)
    return worst, max_abs_diff * scale, agreement


def rows_have_unit_norm(session: ort.InferenceSession, samples: Samples) -> bool:
    """Whether every sample's row of the first output has L2 norm 1: what the manifest states as
    `normalized`, measured rather than assumed (an embedding file need not normalise)."""
    first = next(iter(run(session, samples.feeds(list(range(samples.count)))).values()))
    norms = np.linalg.norm(first.reshape(len(first), -1).astype(np.float64), axis=1)
    return bool(np.all(np.abs(norms - 1.0) <= UNIT_NORM_TOLERANCE))


def check_against_source(session: ort.InferenceSession, samples: Samples, reference: Reference | None,
                         source: str, declared: Declared | None = None,
                         max_abs_diff: float | None = None) -> AccuracyCheck:
    """The graph's answers against the source framework's (within `max_abs_diff` for values up to 1,
    default the build's FP32 threshold); a graph staged as its ONNX file was has only the smoke check."""
    rows = list(range(samples.count))
    smoke = smoke_batches(session, samples, compare_rows=True, declared=declared)
    if reference is None:
        return AccuracyCheck.evaluate(name="import-smoke-batches", metric="max_abs_diff_batched_vs_single",
                                      value=smoke, threshold=SMOKE_MAX_ABS_DIFF, comparison="<=",
                                      figures={"rows": float(len(rows))})
    feeds = samples.feeds(rows)
    worst, threshold, agreement = _compare(run(session, feeds), reference(feeds),
                                           FP32_MAX_ABS_DIFF if max_abs_diff is None else max_abs_diff)
    figures = {"rows": float(len(rows)), "label_agreement": agreement, "max_abs_diff_batched_vs_single": smoke}
    if agreement < MIN_LABEL_AGREEMENT:
        return AccuracyCheck.evaluate(name=f"import-onnx-vs-{source}", metric="label_agreement", value=agreement,
                                      threshold=MIN_LABEL_AGREEMENT, comparison=">=",
                                      figures={**figures, "max_abs_diff": worst})
    if smoke > SMOKE_MAX_ABS_DIFF:
        return AccuracyCheck.evaluate(name="import-smoke-batches", metric="max_abs_diff_batched_vs_single",
                                      value=smoke, threshold=SMOKE_MAX_ABS_DIFF, comparison="<=", figures=figures)
    return AccuracyCheck.evaluate(name=f"import-onnx-vs-{source}", metric="max_abs_diff", value=worst,
                                  threshold=threshold, comparison="<=", figures=figures)


def smoke_batches(session: ort.InferenceSession, samples: Samples, *, compare_rows: bool,
                  declared: Declared | None = None) -> float:
    """Run batches of 1, 3 and 8 rows; refuse wrong row counts, and shapes other than `declared`
    (the graph file's output shapes, which the manifest states); the worst batched-vs-alone difference."""
    if samples.count < max(SMOKE_BATCHES):
        raise ValueError(f"{samples.count} sample rows; the smoke batches need {max(SMOKE_BATCHES)}")
    alone = [run(session, samples.feeds([row])) for row in range(max(SMOKE_BATCHES))]
    worst = 0.0
    for size in SMOKE_BATCHES:
        batched = run(session, samples.feeds(list(range(size))))
        for name, array in batched.items():
            if array.ndim == 0 or array.shape[0] != size:
                raise ImportRefused(f"output {name!r} has shape {list(array.shape)} for a batch of {size}: "
                                    "it must have one row per input row (axis 0)")
            if declared is not None and name in declared:
                _check_declared(name, array.shape, declared[name])
            if compare_rows and array.dtype.kind == "f":
                worst = max(worst, _worst_row_difference(array, [single[name] for single in alone[:size]]))
    return worst


def _check_declared(name: str, actual: tuple[int, ...], declared: Sequence[object]) -> None:
    # The manifest is read from the declared signature: a graph whose outputs differ from it would
    # serve rows the manifest does not describe.
    fixed = [(axis, size) for axis, size in enumerate(declared) if isinstance(size, int)]
    if len(actual) != len(declared) or any(actual[axis] != size for axis, size in fixed):
        raise ImportRefused(f"output {name!r} is declared {list(declared)} but the graph returns shape {list(actual)}")


def _worst_row_difference(batched: npt.NDArray[np.generic], singles: Sequence[npt.NDArray[np.generic]]) -> float:
    worst = 0.0
    for row, single in enumerate(singles):
        # Per-token outputs of a padded batch are longer than the row alone: compare its real positions.
        mine = batched[row][tuple(slice(0, extent) for extent in single.shape[1:])]
        worst = max(worst, float(np.max(np.abs(mine.astype(np.float64) - single[0].astype(np.float64)), initial=0.0)))
    return worst


def check_int8(int8: ort.InferenceSession, fp32: ort.InferenceSession, samples: Samples) -> AccuracyCheck:
    """The build's INT8 gate (mean cosine of rows >= 0.98) on the first float output; label agreement recorded.

    A one-column output (a reranker's score) is compared as one vector over all rows: the cosine
    of two single numbers says only whether their signs agree.
    """
    smoke_batches(int8, samples, compare_rows=False)
    feeds = samples.feeds(list(range(samples.count)))
    quantised, full = run(int8, feeds), run(fp32, feeds)
    floats = [name for name, array in full.items() if array.dtype.kind == "f"]
    if not floats:
        raise ImportRefused("--int8: the graph has no float output to compare; INT8 is for float models")
    name = floats[0]
    rows = len(full[name]) if full[name].size > len(full[name]) else 1
    check = check_int8_close_to_fp32(quantised[name].reshape(rows, -1).astype(np.float32),
                                     full[name].reshape(rows, -1).astype(np.float32))
    agreement = min((_agreement(quantised[key], full[key]) or 1.0) for key in full)
    return check.model_copy(update={"figures": {**check.figures, "label_agreement": agreement}})
