"""The Chinese cache bench's stream, as the article describes its traffic: about 35% of requests
repeat an earlier one word for word, 15% ask an earlier question again in other words, and traps
(the same words, another meaning: 明天 for 今天, 不 added, another order number) are mixed in;
the rest are new questions. Pure and seeded, so it is unit-tested on its own.

The texts: `workers/cache/data/cache-stream-zh.json` (60 customer-service questions, each with 3
paraphrases and 2 traps, written for this bench; none is in a training set) and, for new
questions beyond them, the Chinese FAQ examples (models/build/data/faq-intents-zh-v1.json).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[2]
STREAM_FILE = ROOT / "workers" / "cache" / "data" / "cache-stream-zh.json"
FAQ_ZH_FILE = ROOT / "models" / "build" / "data" / "faq-intents-zh-v1.json"
KINDS = ("new", "repeat", "paraphrase", "trap")


@dataclass(frozen=True)
class Group:
    question: str
    paraphrases: tuple[str, ...]
    traps: tuple[str, ...]


@dataclass(frozen=True)
class Query:
    text: str
    kind: str  # one of KINDS: what a perfect cache would do with it (repeat, paraphrase: serve; else compute)


def load_groups(path: Path = STREAM_FILE) -> list[Group]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return [Group(g["question"], tuple(g["paraphrases"]), tuple(t["text"] for t in g["traps"]))
            for g in raw["groups"]]


def fresh_questions(path: Path = FAQ_ZH_FILE) -> list[str]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return [text for intent in raw["intents"] for split in ("train", "test") for text in intent[split]]


def chinese_stream(groups: Sequence[Group], fresh: Sequence[str], count: int, seed: int, *,
                   repeat: float = 0.35, paraphrase: float = 0.15, trap: float = 0.10) -> list[Query]:
    """`count` queries: each is, by the given shares, a repeat of a text sent before, an unused
    paraphrase or trap of a question sent before, or else a new question (the groups' first, then
    the FAQ examples). A kind with nothing left to draw from gives a new question instead."""
    rng = random.Random(seed)
    order = list(groups)
    rng.shuffle(order)
    extra = list(fresh)
    rng.shuffle(extra)
    asked: list[Group] = []
    unused_paraphrases: list[str] = []
    unused_traps: list[str] = []
    sent: list[str] = []
    out: list[Query] = []
    for _ in range(count):
        draw = rng.random()
        if draw < repeat and sent:
            query = Query(rng.choice(sent), "repeat")
        elif draw < repeat + paraphrase and unused_paraphrases:
            query = Query(unused_paraphrases.pop(rng.randrange(len(unused_paraphrases))), "paraphrase")
        elif draw < repeat + paraphrase + trap and unused_traps:
            query = Query(unused_traps.pop(rng.randrange(len(unused_traps))), "trap")
        elif order:
            group = order.pop()
            asked.append(group)
            unused_paraphrases += group.paraphrases
            unused_traps += group.traps
            query = Query(group.question, "new")
        elif extra:
            query = Query(extra.pop(), "new")
        else:
            query = Query(rng.choice(sent), "repeat")
        if query.kind != "trap":
            sent.append(query.text)  # a trap is a question of its own: never repeated as if it were its twin
        out.append(query)
    return out
