"""The cache verifier's network and its training: an encoder reading both texts at once.

A cross-encoder: "[CLS] query [SEP] cached text [SEP]" (token types 0 and 1) through a backbone
(models/build/verifier_backbone.py: the packaged all-MiniLM-L6-v2, or multilingual-e5-small for
the multilingual verifier), mean-pooled, then a linear layer and a softmax over
("different", "same"). Reading both texts together lets attention line up "open" with
"closed" or "Leeds to York" with "York to Leeds", which two separate embeddings blur.

Training runs on the maintainer's machine only (`scripts/train-models`, five to ten minutes on two
cores): the word embeddings stay frozen (their gradient is most of the optimiser's work and the
pairs teach them nothing new), two passes over the pairs, short sequences. What it learnt ships as
a low-rank adapter (`adapter_from`): each trained matrix's change from the packaged MiniLM cut to
its top singular directions, a megabyte or three, which `apply_adapter` adds back the same way on
every machine. Only this module imports torch.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from tokenizers import Tokenizer
from transformers import PreTrainedModel

from models.build.trained import Tensors
from models.pair_feeds import PAIR_INPUT_NAMES as INPUT_NAMES
from models.pair_feeds import encode_pairs

LABELS = ("different", "same")
OUTPUT_NAME = "probabilities"


@dataclass(frozen=True)
class VerifierHyperparameters:
    epochs: int = 2
    batch_size: int = 32
    lr: float = 2e-4
    head_lr: float = 2e-3
    weight_decay: float = 0.01
    warmup_share: float = 0.1
    seed: int = 0
    # Each pair is learnt as (a, b) and (b, a): the worker reads (new, cached), the writers put either
    # first. On the honest sets it raised the best should-hit at 1% traps from 45% to 55%.
    both_orders: bool = True
    # The shipped adapter's rank: each trained matrix's change cut to this many singular directions.
    # On the held-out pairs rank 16 kept the full fine-tune's should-hit within noise (50.1% against
    # 52.5% at 1% traps; rank 64: 50.0%) in 1.4 MB.
    adapter_rank: int = 16

    def as_manifest(self) -> dict[str, int | float | str]:
        return {f"verifier_{key}": value for key, value in asdict(self).items()}


class PairClassifier(torch.nn.Module):
    def __init__(self, encoder: PreTrainedModel) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = torch.nn.Linear(int(encoder.config.hidden_size), len(LABELS))

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)  # type: ignore[no-any-return]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(input_ids, attention_mask, token_type_ids), dim=-1)


def load_classifier(load_encoder: Callable[[], PreTrainedModel], seed: int) -> PairClassifier:
    torch.manual_seed(seed)
    return PairClassifier(load_encoder())


def train(model: PairClassifier, tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]], labels: Sequence[int],
          hyper: VerifierHyperparameters, on_step: Callable[[int, int], None] | None = None) -> float:
    """Fine-tune in place; returns the last epoch's mean loss. Batches are made of pairs of
    similar length (less padding, a third less time on short questions). `on_step(done, total)`
    is called after each optimiser step."""
    if hyper.both_orders:
        pairs, labels = [*pairs, *((b, a) for a, b in pairs)], [*labels, *labels]
    model.train()
    for parameter in model.encoder.get_input_embeddings().parameters():
        parameter.requires_grad = False
    encoder = [p for p in model.encoder.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW([{"params": encoder, "lr": hyper.lr},
                                   {"params": list(model.head.parameters()), "lr": hyper.head_lr}],
                                  weight_decay=hyper.weight_decay)
    batches = _length_batches(tokenizer, pairs, hyper.batch_size)
    total = hyper.epochs * len(batches)
    warmup = max(1, int(hyper.warmup_share * total))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup))))
    rng = random.Random(hyper.seed)
    target = torch.tensor(list(labels), dtype=torch.long)
    loss_sum = 0.0
    done = 0
    for _ in range(hyper.epochs):
        rng.shuffle(batches)
        loss_sum = 0.0
        for batch in batches:
            feeds = {k: torch.from_numpy(v) for k, v in encode_pairs(tokenizer, [pairs[i] for i in batch]).items()}
            loss = torch.nn.functional.cross_entropy(model.logits(**feeds), target[batch])
            loss.backward()
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            loss_sum += float(loss.detach())
            done += 1
            if on_step is not None:
                on_step(done, total)
    model.eval()
    return loss_sum / max(1, len(batches))


# Suffixes of the adapter's tensor names (safetensors keys): a low-rank change (`up @ down`), a
# whole change (small tensors: biases, LayerNorm, token types) and a new tensor (the head).
_UP, _DOWN, _DELTA = ".up", ".down", ".delta"


def adapter_from(model: PairClassifier, base_encoder: PreTrainedModel, rank: int) -> Tensors:
    """What fine-tuning changed in `model`, small: for each matrix with both sides longer than
    `rank`, its change from `base_encoder` (the backbone as packaged) cut to its top `rank` singular directions (float16
    factors); the other changes whole (float32); the head as it is. The word embeddings were frozen
    and are left out."""
    base = PairClassifier(base_encoder).state_dict()
    tensors: Tensors = {}
    for name, value in model.state_dict().items():
        trained = value.detach().to(torch.float64)
        if name.startswith("head."):
            tensors[name] = trained.to(torch.float32).numpy()
            continue
        if not value.is_floating_point() or torch.equal(value, base[name]):
            continue
        delta = trained - base[name].to(torch.float64)
        if delta.ndim == 2 and min(delta.shape) > rank:
            u, s, vh = torch.linalg.svd(delta, full_matrices=False)
            root = s[:rank].sqrt()
            tensors[name + _UP] = (u[:, :rank] * root).to(torch.float16).numpy()
            tensors[name + _DOWN] = (root[:, None] * vh[:rank]).to(torch.float16).numpy()
        else:
            tensors[name + _DELTA] = delta.to(torch.float32).numpy()
    return tensors


def apply_adapter(base_encoder: PreTrainedModel, tensors: Tensors) -> PairClassifier:
    """The backbone as packaged with the adapter added: the same float32 weights on every machine. The sum
    runs in float64, one rank-one term at a time in a fixed order: elementwise numpy arithmetic
    rounds alike everywhere, where a float32 GEMM's rounding depends on the CPU's kernels."""
    model = PairClassifier(base_encoder)
    state = model.state_dict()
    changed: dict[str, torch.Tensor] = {}
    for key in sorted(tensors):
        if key.endswith(_DOWN):
            continue
        name = key.removesuffix(_UP).removesuffix(_DELTA)
        if name not in state:
            raise ValueError(f"adapter tensor {key!r} does not fit the backbone: it has no {name!r}")
        if key.endswith(_UP):
            up, down = (tensors[name + suffix].astype(np.float64) for suffix in (_UP, _DOWN))
            weight = state[name].numpy().astype(np.float64)
            for k in range(up.shape[1]):
                weight = weight + up[:, k, None] * down[None, k, :]
        elif key.endswith(_DELTA):
            weight = state[name].numpy().astype(np.float64) + tensors[key].astype(np.float64)
        else:
            weight = tensors[key].astype(np.float64)
        if state[name].shape != weight.shape:
            raise ValueError(f"adapter tensor {key!r} does not fit the backbone: {name} is "
                             f"{tuple(state[name].shape)}, the adapter gives {weight.shape}")
        changed[name] = torch.from_numpy(weight.astype(np.float32))
    missing = {name for name in state if name.startswith("head.")} - changed.keys()
    if missing:
        raise ValueError(f"the adapter has no {sorted(missing)}: it is not a cache-verifier adapter")
    model.load_state_dict({**state, **changed})
    model.eval()
    return model


def _length_batches(tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]], size: int) -> list[list[int]]:
    lengths = [len(e.ids) for e in tokenizer.encode_batch(list(pairs))]
    order = sorted(range(len(pairs)), key=lambda i: lengths[i])
    return [order[i:i + size] for i in range(0, len(order), size)]


def score(model: PairClassifier, tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]],
          batch_size: int = 128) -> npt.NDArray[np.float32]:
    """P(same) per pair, from the torch model."""
    out: list[npt.NDArray[np.float32]] = []
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            feeds = encode_pairs(tokenizer, pairs[start:start + batch_size])
            probabilities = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
            out.append(probabilities[:, 1].numpy().astype(np.float32))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def export_onnx(model: PairClassifier, path: Path, opset: int = 17) -> None:
    example = {k: torch.from_numpy(v) for k, v in encode_pairs_example().items()}
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    torch.onnx.export(model, (example["input_ids"], example["attention_mask"], example["token_type_ids"]),
                      str(path), input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME],
                      dynamic_axes={**axes, OUTPUT_NAME: {0: "batch"}}, opset_version=opset, dynamo=False)


def encode_pairs_example() -> dict[str, npt.NDArray[np.int64]]:
    ids = np.array([[101, 2003, 2009, 2330, 102, 2003, 2009, 2701, 102]], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids),
            "token_type_ids": np.array([[0, 0, 0, 0, 0, 1, 1, 1, 1]], dtype=np.int64)}


def recipe(backbone: str, encoder_id: str, name: str) -> dict[str, str]:
    import transformers

    return {
        "graph": f"cross-encoder: {backbone} (as in {encoder_id}) over '[CLS] a [SEP] b [SEP]', "
                 "mean-pooled -> Linear(384, 2) -> Softmax (different, same)",
        "training": "fine-tuned on written and project pairs, each both ways round (AdamW, linear warm-up and decay, "
                    "word embeddings frozen) by scripts/train-models; shipped as a low-rank adapter "
                    f"(models/build/data/trained/{name}) and added to the packaged weights in float64",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
