"""What a model's output row means to a caller: the `outputs` map of a result.

An embedding model's row is the embedding, kept as the float32 row it is: the result packs it
from numpy (schemas/packing.py), in whichever encoding the request asked for. A classifier's row is a probability per label
(the manifest lists the labels in row order); callers get the winning label, its
probability and the runners-up, never a bare vector they would have to decode.
"""

from typing import Any

import numpy as np
import numpy.typing as npt

from models.registry import ModelManifest

TOP_LABELS = 3


def outputs_of(manifest: ModelManifest, row: npt.NDArray[np.float32]) -> dict[str, Any]:
    if manifest.task == "classification":
        order = np.argsort(row)[::-1][:TOP_LABELS]
        return {
            "label": manifest.labels[int(order[0])],
            "score": float(row[order[0]]),
            "top": [[manifest.labels[int(i)], float(row[i])] for i in order],
        }
    return {"embedding": row}
