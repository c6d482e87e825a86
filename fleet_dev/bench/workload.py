"""The benchmark's text workload: seeded, customer-support style queries.

Most queries are short one-liners (3-15 words: "where is my order 48213?"); about one in
seven is a longer message with context (a greeting, what happened, the ask, a sign-off) of
16 to 60 words. Slots (order numbers, products, cities, amounts) make almost every query
unique, so a result cache would rarely hit and the benchmark measures batching, not caching.

    texts = support_queries(2000, seed=7)
    print(format_histogram(length_histogram(token_counts)))
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

LONG_MESSAGE_SHARE = 0.15
MAX_WORDS = 60
MIN_LONG_WORDS = 16
# Mean words a long message runs past MIN_LONG_WORDS (exponential tail, capped at MAX_WORDS).
LONG_TAIL_MEAN_EXTRA_WORDS = 14.0

ASKS = (
    "where is my order {order}?",
    "refund status for order {order}",
    "cancel my subscription",
    "how do I reset my password",
    "my {item} arrived damaged",
    "can I change the delivery address for order {order}?",
    "I was charged twice for the {item}",
    "how long does shipping to {city} take?",
    "do you ship to {city}?",
    "the {item} I bought does not turn on",
    "I want to return the {item} I ordered on {day}",
    "why was my card declined when paying for the {item}?",
    "how do I change the email on my account?",
    "is the {item} back in stock?",
    "discount code {code} is not working",
    "can I talk to a human please",
    "track package {tracking}",
    "invoice for order {order} please",
    "my account is locked after too many login attempts, what now?",
    "how do I use a gift card at checkout?",
    "the app keeps logging me out on my {device}",
    "wrong size {item}, I need to exchange it",
    "order {order} says delivered but nothing arrived",
    "what is your return policy for opened items?",
    "please delete my account and all my data",
    "I never got the confirmation email for order {order}",
    "can I pay in installments?",
    "the price of the {item} dropped right after I bought it, can I get the difference back?",
    "how do I switch my plan from {plan} to {other_plan}?",
    "one item is missing from order {order}",
    "when will the {item} ship?",
    "I need a copy of my receipt for {amount}",
    "order {order} was cancelled and I don't know why",
    "does the {item} come with a warranty?",
)
CONTEXT = (
    "I ordered the {item} on {day} as a birthday present for my {relative}.",
    "The tracking page has said in transit for {count} days now.",
    "I already wrote to you on {day} and was told it would be sorted within 48 hours.",
    "Your chat assistant keeps sending me around in circles.",
    "I have been a customer for {count} years and this has never happened before.",
    "The courier left a note saying nobody was home, but I was home all day.",
    "I paid {amount} with my card ending in {last4}.",
    "When I opened the box the {item} was scratched and a part was missing.",
    "I tried resetting my password twice and both links had already expired.",
    "My bank shows two pending charges of {amount} from your store.",
    "I live in {city} and the estimate said {count} business days.",
    "I need this sorted before I travel on {day}.",
    "The order number is {order} in case you need it.",
    "I also sent photos of the damage from my {device} yesterday.",
)
GREETINGS = ("Hi,", "Hello,", "Hi there,", "Good morning,", "Hello support team,", "Hey,")
SIGN_OFFS = ("Thanks.", "Thanks in advance, {name}.", "Please get back to me soon.", "Regards, {name}.",
             "Thank you for your help.")
OPENERS = ("", "", "", "hi ", "hello, ", "hey, ", "quick question: ")
CLOSERS = ("", "", "", " thanks", " please", " asap", "!!", " thank you")
SLOTS: dict[str, tuple[str, ...]] = {
    "item": ("blue rain jacket", "wireless earbuds", "standing desk", "coffee grinder", "yoga mat", "kids bike",
             "phone case", "air fryer", "winter boots", "desk lamp", "gaming mouse", "backpack", "smart watch",
             "kettle", "office chair", "running shoes", "bluetooth speaker", "duvet cover"),
    "city": ("Berlin", "Lisbon", "Toronto", "Osaka", "Austin", "Dublin", "Warsaw", "Melbourne", "Lyon", "Seattle"),
    "day": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "the 3rd", "the 14th", "the 21st", "last week"),
    "device": ("iPhone", "Android phone", "tablet", "laptop"),
    "plan": ("basic", "monthly", "family"),
    "other_plan": ("premium", "annual", "student"),
    "relative": ("sister", "son", "dad", "grandmother", "best friend"),
    "name": ("Maria", "Tom", "Aisha", "Kenji", "Olga", "Luis"),
}


@dataclass(frozen=True)
class HistogramBin:
    low: int
    high: int | None  # None: open-ended last bin
    count: int

    @property
    def label(self) -> str:
        return f"{self.low}+" if self.high is None else f"{self.low}-{self.high}"


DEFAULT_TOKEN_EDGES = (1, 9, 13, 17, 25, 33, 49, 65, 97)


def _fill(template: str, rng: random.Random) -> str:
    values = {name: rng.choice(choices) for name, choices in SLOTS.items()}
    values.update(
        order=str(rng.randint(10_000, 999_999)),
        tracking=f"{rng.choice('ABCDEFGHJK')}{rng.choice('LMNPQRSTUV')}{rng.randint(10**8, 10**9 - 1)}",
        code=f"{rng.choice(('SAVE', 'WELCOME', 'SPRING', 'VIP'))}{rng.randint(5, 50)}",
        amount=f"${rng.randint(5, 400)}.{rng.randint(0, 99):02d}",
        last4=f"{rng.randint(0, 9999):04d}",
        count=str(rng.randint(2, 12)),
    )
    return template.format(**values)


def _short_query(rng: random.Random) -> str:
    ask = _fill(rng.choice(ASKS), rng)
    text = rng.choice(OPENERS) + ask + rng.choice(CLOSERS)
    return text[0].upper() + text[1:] if rng.random() < 0.5 else text


def _long_message(rng: random.Random) -> str:
    target = min(MAX_WORDS, MIN_LONG_WORDS + int(rng.expovariate(1 / LONG_TAIL_MEAN_EXTRA_WORDS)))
    ask = _fill(rng.choice(ASKS), rng)
    ask = ask[0].upper() + ask[1:] + ("" if ask.endswith("?") else ".")
    parts = [ask]
    closing = [_fill(rng.choice(SIGN_OFFS), rng)] if rng.random() < 0.6 else []
    opening = [rng.choice(GREETINGS)] if rng.random() < 0.6 else []
    used = len(ask.split()) + sum(len(p.split()) for p in closing + opening)
    for template in rng.sample(CONTEXT, len(CONTEXT)):
        sentence = _fill(template, rng)
        words = len(sentence.split())
        if used + words > MAX_WORDS or (used >= target and used >= MIN_LONG_WORDS):
            continue
        parts.insert(len(parts) - 1, sentence)  # context comes before the ask
        used += words
    return " ".join(opening + parts + closing)


def support_queries(count: int, seed: int = 7) -> list[str]:
    """`count` customer-support queries, the same list for the same seed."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rng = random.Random(seed)
    return [_long_message(rng) if rng.random() < LONG_MESSAGE_SHARE else _short_query(rng) for _ in range(count)]


def word_count(text: str) -> int:
    return len(text.split())


def length_histogram(lengths: Sequence[int], edges: Sequence[int] = DEFAULT_TOKEN_EDGES) -> list[HistogramBin]:
    """Counts of `lengths` in [edges[i], edges[i+1]); the last bin is open-ended."""
    if not edges or list(edges) != sorted(set(edges)):
        raise ValueError(f"edges must be strictly increasing, got {list(edges)}")
    bins = []
    for index, low in enumerate(edges):
        high = edges[index + 1] if index + 1 < len(edges) else None
        count = sum(1 for n in lengths if n >= low and (high is None or n < high))
        bins.append(HistogramBin(low, None if high is None else high - 1, count))
    return bins


def format_histogram(bins: Sequence[HistogramBin], *, width: int = 40, unit: str = "tokens") -> str:
    """A small text histogram: one line per bin with its count, share and a bar."""
    total = sum(b.count for b in bins) or 1
    peak = max((b.count for b in bins), default=0) or 1
    label_width = max(len(b.label) for b in bins) if bins else 0
    lines = []
    for b in bins:
        bar = "#" * round(width * b.count / peak)
        lines.append(f"  {b.label.rjust(label_width)} {unit}  {b.count:6d}  {100 * b.count / total:5.1f}%  {bar}")
    return "\n".join(lines)
