"""Guards of the semantic cache: pairs of texts that must never share an answer, however close
their embeddings are.

Sentence embeddings put "enable 2FA" next to "disable 2FA" and "7 am" next to "7 pm": the
words that flip the answer are a small part of the sentence. A threshold alone cannot tell
them apart without also refusing most real paraphrases, so a semantic hit must also pass
`meaning_conflict(query, cached_text) is None`. The checks, in order:

- identifiers: e-mail addresses, URLs and tokens mixing letters and digits (order ids,
  tracking numbers) must be the same sets;
- numbers: digits (``1,000`` = ``1000`` = ``1k``; ``10.00`` = ``10``), number words
  ("twenty five", "a hundred", "twice"), ordinals ("3rd", "third"), Chinese numerals
  (三 = 3, 两百 = 200, 二〇二四 = 2024: "3天" and "三天" agree, "两件" and "三件" do not) and
  times of day with am/pm ("7 am" = "7:00 a.m." but != "7 pm"; noon, midnight) must be the same sets;
- negation: a negation ("not", "n't", "never", "no", "without", "unable", ...) in one text
  and none in the other, or a word negated by its prefix ("authorized" vs "unauthorized",
  "eligible" vs "ineligible");
- opposites: one text uses one side of an opposite pair (enable/disable, add/remove,
  cancel/renew, in/out, before/after, safe/avoid, ...) that the other lacks while the other
  uses the other side ("turn on"/"turn off", "log in"/"log out" are folded into these first);
- proper nouns: a capitalised word that is not at the start of a sentence, or a word with
  inner capitals or an acronym (PayPal, iPhone, UK), whose lower-case form the other text
  does not contain at all;
- meaning-critical vocabulary: countries, currencies, payment brands, carriers, platforms,
  months, weekdays and relative days must be the same sets; account fields (password,
  e-mail, phone...), plans, shipping speeds and billing periods must be the same sets when
  both texts name one;
- related entities (`related_entities.py`): two siblings of one kind ("fridge" vs "freezer"),
  or the same two in the other order ("from savings to checking" vs "from checking to savings");
- swapped roles (`role_swap.py`): any two shared words on the other sides of a direction word
  ("merge develop into main" vs "merge main into develop").

Limits (what it cannot catch, by design cheap: regex and sets, no parser, no model):
- a meaning change carried by an ordinary word outside these lists ("reset my password"
  vs "reset my PIN" is caught; "return a shirt" vs "return a sofa" is not);
- negation scope: "I can log in but not pay" vs "I can pay but not log in" both negate;
  two negations that cancel count as a negation;
- paraphrases that swap a listed word for an unlisted synonym ("turn on 2FA" vs "set up
  two-step login" pass; "my order did not arrive" vs "my order is missing" is refused):
  the guard errs towards refusing, which costs a cache hit, never a wrong answer;
- English only; lower-case proper nouns outside the lists ("paypal") are only caught
  through the lists.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from workers.cache.related_entities import Mentions, mentions, related_conflict
from workers.cache.role_swap import Link, links, roles_conflict

# --- vocabulary ------------------------------------------------------------------------

NEGATIONS = frozenset({
    "not", "non", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "without", "cannot",
    "unable", "cant", "dont", "doesnt", "didnt", "wont", "isnt", "arent", "wasnt", "werent", "havent",
    "hasnt", "hadnt", "shouldnt", "wouldnt", "couldnt", "aint",
})

# Phrases folded into one token before tokenising, so their parts do not read as other words.
PHRASES: tuple[tuple[str, str], ...] = (
    (r"\b(?:two|2)[\s-]?(?:factor|step)(?:\s+(?:authentication|auth|verification|login))?\b", "2fa"),
    (r"\bmulti[\s-]?factor(?:\s+(?:authentication|auth))?\b|\bmfa\b", "2fa"),
    (r"\be-mail", "email"),
    (r"\b(?:log|sign)(?:ging|ged|ing|ed|s)?[\s-]?(?:in|on)(?:to)?\b", "login"),
    (r"\b(?:log|sign)(?:ging|ged|ing|ed|s)?[\s-]?(?:out|off)\b", "logout"),
    (r"\bsign(?:ing|ed|s)?[\s-]?up\b", "signup"),
    (r"\b(?:turn|switch)(?:ing|ed|s)?\s+(?:it\s+|them\s+|2fa\s+)?on\b", "enable"),
    (r"\b(?:turn|switch)(?:ing|ed|s)?\s+(?:it\s+|them\s+|2fa\s+)?off\b", "disable"),
    (r"\bemail\s+address(?:es)?\b", "email"),
    (r"\b(?:phone|mobile|cell|telephone)\s+(?:number|no)s?\b", "phone"),
    (r"\b(?:home|shipping|delivery|billing|postal|mailing)\s+address(?:es)?\b", "address"),
    (r"\bnext[\s-]day\b", "nextday"),
    (r"\bsame[\s-]day\b", "sameday"),
    (r"\bfree\s+trial\b", "trial"),
    (r"\bapple\s+pay\b", "applepay"),
    (r"\bgoogle\s+pay\b", "googlepay"),
    (r"\bopt(?:ing|ed|s)?[\s-]in\b", "optin"),
    (r"\bopt(?:ing|ed|s)?[\s-]out\b", "optout"),
    (r"\bcan\s+not\b", "cannot"),
)


def _forms(*bases: str) -> frozenset[str]:
    """Crude inflections of each base (enable -> enables, enabled, enabling); over-generation is harmless."""
    out: set[str] = set()
    for base in bases:
        stem = base[:-1] if base.endswith("e") else base
        out |= {base, base + "s", base + "es", base + "d", base + "ed", stem + "ed", stem + "ing",
                base + base[-1] + "ed", base + base[-1] + "ing", base[:-1] + "ies" if base.endswith("y") else base,
                base[:-1] + "ied" if base.endswith("y") else base}
    return frozenset(out)


OPPOSITES: tuple[tuple[frozenset[str], frozenset[str]], ...] = (
    (_forms("enable", "activate", "reactivate"), _forms("disable", "deactivate")),
    (frozenset({"on"}), frozenset({"off"})),
    (frozenset({"in", "into", "inside"}), frozenset({"out", "outside"})),
    (frozenset({"login"}), frozenset({"logout"})),
    (frozenset({"optin"}), frozenset({"optout"})),
    (_forms("add", "attach", "include", "insert"), _forms("remove", "delete", "detach", "exclude", "drop")),
    (_forms("increase", "raise", "extend"), _forms("decrease", "reduce", "lower", "shorten")),
    (_forms("cancel", "terminate", "end"), _forms("renew", "resume", "continue", "reactivate", "restart", "start")),
    (_forms("upgrade"), _forms("downgrade")),
    (_forms("open", "unlock", "unblock", "unfreeze"), _forms("close", "lock", "block", "freeze")),
    (frozenset({"before", "prior", "earlier", "early"}), frozenset({"after", "later", "late"})),
    (_forms("subscribe", "join", "signup", "register"), _forms("unsubscribe", "leave", "quit")),
    (_forms("link", "connect", "pair"), _forms("unlink", "disconnect", "unpair")),
    (_forms("accept", "approve", "allow", "permit"),
     _forms("reject", "decline", "deny", "refuse", "forbid") | {"forbidden"}),
    # Polarity of a yes/no question: "Is it safe to leave the heater on?" is answered "yes" where
    # "Should I avoid leaving the heater on?" is answered "no".
    (frozenset({"safe", "safely", "okay", "ok", "fine", "alright", "allowed", "permitted"}),
     _forms("avoid", "stop") | {"dangerous", "risky", "harmful", "hazard", "hazardous", "forbidden", "prohibited",
                                "banned", "bad"}),
    (_forms("upload", "import"), _forms("download", "export")),
    (_forms("send"), _forms("receive")),
    (_forms("buy", "purchase"), _forms("sell")),
    (_forms("pause", "suspend"), _forms("unpause", "unsuspend", "resume")),
    (_forms("show", "display"), _forms("hide")),
    (_forms("follow", "mute"), _forms("unfollow", "unmute")),
    (frozenset({"more", "higher", "maximum", "max", "most", "above", "over"}),
     frozenset({"less", "fewer", "lower", "minimum", "min", "least", "below", "under"})),
    (frozenset({"first", "earliest", "oldest", "previous"}), frozenset({"last", "latest", "newest", "next"})),
    (frozenset({"full", "whole", "entire"}), frozenset({"partial", "half"})),
    (frozenset({"public"}), frozenset({"private"})),
    (frozenset({"personal", "individual"}), frozenset({"business", "company", "team", "corporate"})),
    (frozenset({"domestic"}), frozenset({"international", "abroad", "overseas"})),
    (frozenset({"credit"}), frozenset({"debit"})),
    (frozenset({"new", "current"}), frozenset({"old", "former", "previous"})),
    (frozenset({"same"}), frozenset({"different", "another", "other"})),
    (frozenset({"succeeded", "successful", "worked", "approved"}), frozenset({"failed", "declined", "unsuccessful"})),
    # Tense: "is it due in June" / "was it due in June", "what will my balance be" / "what was it".
    (frozenset({"is", "are", "am", "will"}), frozenset({"was", "were"})),
)

# Sets that must be equal (presence in one text only is a conflict).
CRITICAL: dict[str, frozenset[str]] = {
    "country": frozenset({
        "usa", "america", "canada", "mexico", "brazil", "argentina", "uk", "britain", "england", "scotland",
        "ireland", "france", "germany", "spain", "portugal", "italy", "netherlands", "belgium", "switzerland",
        "austria", "poland", "sweden", "norway", "denmark", "finland", "greece", "turkey", "russia", "ukraine",
        "india", "china", "japan", "korea", "singapore", "australia", "zealand", "africa", "nigeria", "egypt",
        "israel", "uae", "dubai", "europe", "eu", "asia", "hawaii", "alaska", "puerto", "rico",
    }),
    "currency": frozenset({"usd", "eur", "gbp", "jpy", "cad", "aud", "chf", "inr", "cny", "btc", "bitcoin", "crypto"}),
    "brand": frozenset({
        "visa", "mastercard", "amex", "discover", "paypal", "venmo", "klarna", "afterpay", "stripe", "applepay",
        "googlepay", "apple", "google", "amazon", "microsoft", "facebook", "instagram", "twitter", "slack",
    }),
    "carrier": frozenset({"ups", "fedex", "dhl", "usps", "royal", "hermes", "dpd", "gls", "tnt"}),
    "platform": frozenset({"ios", "iphone", "ipad", "android", "windows", "mac", "macos", "linux", "chrome",
                           "firefox", "safari", "desktop", "tablet", "smartwatch", "tv"}),
    "month": frozenset({"january", "february", "march", "april", "june", "july", "august", "september",
                        "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
                        "sept", "oct", "nov", "dec"}),
    "day": frozenset({"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "weekend",
                      "weekday", "weekdays", "today", "tonight", "tomorrow", "yesterday", "morning", "afternoon",
                      "evening", "night", "holiday", "holidays", "christmas"}),
}
# Sets that must be equal when both texts name a member ("my email" vs "my phone number").
EXCLUSIVE: dict[str, frozenset[str]] = {
    "account field": frozenset({"password", "username", "email", "phone", "address", "pin", "name", "birthday",
                                "photo", "avatar", "card", "iban", "passcode"}),
    "plan": frozenset({"free", "basic", "standard", "plus", "pro", "premium", "business", "enterprise", "family",
                       "student", "starter", "trial"}),
    "speed": frozenset({"standard", "express", "overnight", "economy", "priority", "sameday", "nextday", "expedited"}),
    "period": frozenset({"monthly", "yearly", "annual", "annually", "weekly", "daily", "quarterly", "lifetime"}),
    "channel": frozenset({"sms", "text", "call", "chat", "voicemail", "whatsapp", "letter", "fax"}),
    "unit": frozenset({"kilobytes", "megabytes", "gigabytes", "terabytes", "kb", "mb", "gb", "tb", "kilograms", "kg",
                       "lbs", "lb", "grams", "ounces", "oz", "litres", "liters", "gallons", "miles",
                       "kilometres", "kilometers", "km", "celsius", "fahrenheit", "inches", "centimetres",
                       "centimeters", "cm", "metres", "meters", "feet", "hours", "days", "weeks", "minutes"}),
}

CURRENCY_SYMBOLS = {"$": "usd", "€": "eur", "£": "gbp", "¥": "jpy"}
CURRENCY_WORDS = {"dollar": "usd", "dollars": "usd", "euro": "eur", "euros": "eur", "pound": "gbp",
                  "pounds": "gbp", "yen": "jpy", "rupee": "inr", "rupees": "inr"}

UNITS = {"": 1, "k": 1000, "m": 1_000_000, "bn": 1_000_000_000}
SMALL_NUMBERS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "dozen": 12, "twice": 2, "thrice": 3, "double": 2,
    "triple": 3, "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10,
}
SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"https?://\S+|www\.\S+")
_AMPM = re.compile(r"\b([ap])\.?\s?m\b\.?")
_TIME = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*([ap])m\b|\b(\d{1,2}):(\d{2})\b")
_TOKEN = re.compile(r"[a-z0-9]+(?:[.,'][a-z0-9]+)*|[$€£¥]")
_NUMBER = re.compile(r"(\d+(?:,\d{3})*(?:\.\d+)?)(k|m|bn|st|nd|rd|th|x|gb|mb|tb|kb|h|hr|hrs|d|min|mins|pcs|)")
_WORD = re.compile(r"\b[A-Za-z][A-Za-z0-9&]*(?:'[A-Za-z]+)?")


@dataclass(frozen=True)
class Features:
    """What the guard compares, extracted once per text."""

    identifiers: frozenset[str]
    numbers: frozenset[str]
    negated: bool
    words: frozenset[str]  # lower-case words after folding phrases ("log in" -> "login")
    spelled: frozenset[str]  # lower-case words as written, for the proper-noun check
    proper: frozenset[str]
    related: Mentions
    roles: tuple[Link, ...]


def meaning_conflict(a: str, b: str) -> str | None:
    """A reason why `a` and `b` must not share an answer, or None when the guard finds none."""
    return conflict_between(features(a), features(b))


def conflict_between(fa: Features, fb: Features) -> str | None:
    if fa.identifiers != fb.identifiers:
        return f"identifiers differ: {_diff(fa.identifiers, fb.identifiers)}"
    if fa.numbers != fb.numbers:
        return f"numbers differ: {_diff(fa.numbers, fb.numbers)}"
    if fa.negated != fb.negated:
        return "negation in one text only"
    prefixed = _negated_by_prefix(fa.words - fb.words, fb.words - fa.words)
    if prefixed:
        return f"negating prefix: {prefixed}"
    for left, right in OPPOSITES:
        a_left, a_right, b_left, b_right = fa.words & left, fa.words & right, fb.words & left, fb.words & right
        if (a_left - fb.words and b_right - fa.words and not a_right and not b_left) or \
                (a_right - fb.words and b_left - fa.words and not a_left and not b_right):
            return f"opposites: {sorted(a_left | a_right)} vs {sorted(b_left | b_right)}"
    for proper, other in ((fa.proper, fb), (fb.proper, fa)):
        missing = proper - other.words - other.spelled
        if missing:
            return f"proper noun in one text only: {sorted(missing)}"
    for kind, vocabulary in CRITICAL.items():
        if fa.words & vocabulary != fb.words & vocabulary:
            return f"{kind} differs: {_diff(fa.words & vocabulary, fb.words & vocabulary)}"
    for kind, vocabulary in EXCLUSIVE.items():
        a_named, b_named = fa.words & vocabulary, fb.words & vocabulary
        if a_named and b_named and a_named != b_named:
            return f"{kind} differs: {_diff(a_named, b_named)}"
    return related_conflict(fa.related, fb.related) or roles_conflict(fa.roles, fb.roles)


def features(text: str) -> Features:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")
    identifiers = {m.lower() for m in _EMAIL.findall(text)} | {m.lower().rstrip(".,!?") for m in _URL.findall(text)}
    text = _URL.sub(" ", _EMAIL.sub(" ", text))
    proper = _proper_nouns(text)
    lower = _AMPM.sub(lambda m: f" {m.group(1)}m ", text.lower())
    lower = re.sub(r"\bnoon\b", " 12:00pm ", re.sub(r"\bmidnight\b", " 12:00am ", lower))
    for pattern, replacement in PHRASES:
        lower = re.sub(pattern, f" {replacement} ", lower)
    numbers: set[str] = set()
    lower = _TIME.sub(lambda m: _time(m, numbers), lower)
    words: list[str] = []
    for token in _TOKEN.findall(lower.replace("-", " ")):
        if token in CURRENCY_SYMBOLS:
            words.append(CURRENCY_SYMBOLS[token])
        elif token[0].isdigit() or any(ch.isdigit() for ch in token):
            number = _NUMBER.fullmatch(token)
            if number:
                numbers.add(_canonical_number(number.group(1), UNITS.get(number.group(2), 1)))
            else:
                identifiers.add(token)
        else:
            words.append(CURRENCY_WORDS.get(token, token))
    numbers |= _number_words(words) | _chinese_numbers(text)
    word_set = frozenset(w.replace("'", "") for w in words) | frozenset(words)
    negated = any(w in NEGATIONS or w.endswith("n't") for w in word_set)
    spelled = frozenset(w.lower() for w in _WORD.findall(text))
    return Features(frozenset(identifiers), frozenset(numbers), negated, word_set, spelled, frozenset(proper),
                    mentions(text), links(text))


NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non")


def _negated_by_prefix(only_a: frozenset[str], only_b: frozenset[str]) -> str | None:
    """A word in one text that is the other's word with a negating prefix ("authorized" vs
    "unauthorized", "eligible" vs "ineligible", "refundable" vs "non-refundable")."""
    for words, others in ((only_a, only_b), (only_b, only_a)):
        for word in words:
            for prefix in NEGATING_PREFIXES:
                if word.startswith(prefix) and len(word) - len(prefix) >= 4 and word[len(prefix):] in others:
                    return f"{word!r} vs {word[len(prefix):]!r}"
    return None


def _proper_nouns(text: str) -> set[str]:
    found: set[str] = set()
    for match in _WORD.finditer(text):
        word = match.group().split("'")[0]
        if word in ("I", "OK", "Ok") or len(word) < 2:
            continue
        before = text[:match.start()].rstrip()
        sentence_start = not before or before[-1] in ".!?:;\"(\n"
        inner_caps = any(ch.isupper() for ch in word[1:])
        if inner_caps or (word[0].isupper() and not sentence_start):
            found.add(word.lower())
    return found


def _time(match: re.Match[str], numbers: set[str]) -> str:
    if match.group(1):
        hour, minute, half = int(match.group(1)), int(match.group(2) or 0), match.group(3)
        numbers.add(f"{hour % 12 or 12}:{minute:02d}{half}m")
    else:
        numbers.add(f"{int(match.group(4))}:{int(match.group(5)):02d}")
    return " "


def _canonical_number(digits: str, scale: int) -> str:
    try:
        value = Decimal(digits.replace(",", "")) * scale
    except InvalidOperation:
        return digits
    return format(value.normalize(), "f")


def _number_words(words: list[str]) -> set[str]:
    """Values of runs of number words ("twenty five" -> 25, "a hundred" -> 100); a lone "one"
    is a pronoun far more often than a count, so it is not a number."""
    found: set[str] = set()
    run: list[str] = []
    for word in [*words, ""]:
        if word in SMALL_NUMBERS or word in SCALES or (run and word == "and"):
            run.append(word)
            continue
        while run and run[-1] == "and":
            run.pop()
        if run and run != ["one"]:
            total = current = 0
            for part in run:
                if part in SCALES:
                    if SCALES[part] == 100:
                        current = max(current, 1) * 100
                    else:
                        total, current = total + max(current, 1) * SCALES[part], 0
                elif part != "and":
                    current += SMALL_NUMBERS[part]
            found.add(str(total + current))
        run = []
    return found


_CHINESE_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
                   "九": 9}
_CHINESE_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
_CHINESE_NUMERAL = re.compile(f"[{''.join(_CHINESE_DIGITS)}{''.join(_CHINESE_UNITS)}]+")


def _chinese_numbers(text: str) -> set[str]:
    """Values of runs of Chinese numerals ("三" -> 3, "两百" -> 200, "二〇二四" -> 2024). A lone 一 is
    "a", "once" or "the same" (一下, 一起, 一样) far more often than a count, as a lone "one" is."""
    return {str(_chinese_value(run)) for run in _CHINESE_NUMERAL.findall(text) if run != "一"}


def _chinese_value(run: str) -> int:
    if not any(ch in _CHINESE_UNITS for ch in run):
        return int("".join(str(_CHINESE_DIGITS[ch]) for ch in run))  # digit by digit: a year, a code
    total = section = number = 0
    for ch in run:
        if ch in _CHINESE_DIGITS:
            number = _CHINESE_DIGITS[ch]
        elif (unit := _CHINESE_UNITS[ch]) >= 10_000:
            total, section = total + (section + number) * unit, 0
            number = 0
        else:
            section, number = section + (number or 1) * unit, 0
    return total + section + number


def _diff(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> str:
    return f"{sorted(a - b)} vs {sorted(b - a)}"
