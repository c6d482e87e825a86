"""Word lists the verifier's pair generator draws on (models/build/verifier_pairs.py).

Each list is split by a stable hash of its entry into a training part and a calibration part
(`split_of`), so the threshold is calibrated on antonyms, entities and templates the model
never saw while training: a measure of how it does on words outside these lists.
"""

from __future__ import annotations

import hashlib
from typing import TypeVar

T = TypeVar("T")

# Pairs whose swap changes the answer.
ANTONYMS: tuple[tuple[str, str], ...] = (
    ("open", "closed"), ("eat", "avoid"), ("allowed", "forbidden"), ("increase", "decrease"), ("buy", "sell"),
    ("arrive", "depart"), ("include", "exclude"), ("enable", "disable"), ("accept", "reject"), ("cheapest", "priciest"),
    ("start", "stop"), ("add", "remove"), ("upload", "download"), ("import", "export"), ("lock", "unlock"),
    ("subscribe", "unsubscribe"), ("hot", "cold"), ("early", "late"), ("safe", "dangerous"), ("legal", "illegal"),
    ("free", "paid"), ("public", "private"), ("online", "offline"), ("inside", "outside"), ("upstairs", "downstairs"),
    ("maximum", "minimum"), ("first", "last"), ("highest", "lowest"), ("fastest", "slowest"), ("oldest", "newest"),
    ("win", "lose"), ("pass", "fail"), ("borrow", "lend"), ("give", "take"), ("push", "pull"),
    ("raise", "lower"), ("hire", "fire"), ("join", "leave"), ("login", "logout"), ("connect", "disconnect"),
    ("charge", "refund"), ("deposit", "withdraw"), ("send", "receive"), ("approve", "deny"),
    ("visible", "hidden"), ("available", "unavailable"), ("valid", "invalid"), ("healthy", "unhealthy"), ("wet", "dry"),
    ("heavy", "light"), ("long", "short"), ("wide", "narrow"), ("cheap", "expensive"), ("easy", "hard"),
    ("quiet", "loud"), ("north", "south"), ("east", "west"), ("left", "right"), ("morning", "evening"),
    ("weekday", "weekend"), ("domestic", "international"), ("inbound", "outbound"), ("arrivals", "departures"),
    ("encrypt", "decrypt"), ("install", "uninstall"), ("activate", "deactivate"), ("mount", "unmount"),
    ("compress", "decompress"), ("zoom in", "zoom out"), ("turn on", "turn off"), ("sign up", "sign out"),
    ("check in", "check out"), ("pick up", "drop off"), ("speed up", "slow down"), ("plug in", "unplug"),
    ("boil", "freeze"), ("heat", "cool"), ("gain", "lose"), ("profit", "loss"), ("asleep", "awake"),
    ("pregnant", "breastfeeding"), ("adults", "children"), ("men", "women"), ("beginner", "expert"),
    ("indoor", "outdoor"), ("sweet", "sour"), ("raw", "cooked"), ("fresh", "frozen"), ("full", "empty"),
    ("above", "below"), ("over", "under"),
    ("more", "less"), ("most", "least"), ("better", "worse"), ("best", "worst"), ("true", "false"),
    ("succeed", "fail"), ("allow", "block"), ("permit", "ban"), ("mandatory", "optional"), ("required", "optional"),
    ("agree", "disagree"), ("like", "dislike"), ("remember", "forget"), ("save", "discard"), ("merge", "split"),
    ("inhale", "exhale"), ("expand", "collapse"), ("show", "hide"), ("attach", "detach"), ("follow", "unfollow"),
    ("mute", "unmute"), ("pause", "resume"), ("rent", "own"), ("renew", "cancel"),
    ("before", "after"), ("positive", "negative"), ("rise", "fall"), ("fixed", "variable"), ("manual", "automatic"),
    ("cheaper", "dearer"), ("bigger", "smaller"), ("larger", "smaller"), ("longer", "shorter"), ("earlier", "later"),
    ("higher", "lower"), ("more", "fewer"), ("stronger", "weaker"), ("heavier", "lighter"), ("older", "younger"),
    ("easier", "harder"), ("quickest", "longest"), ("nearest", "farthest"), ("busiest", "quietest"),
    ("increase", "reduce"), ("grow", "shrink"), ("strict", "lenient"), ("rich", "poor"), ("thick", "thin"),
)

# Negation inside a word (un-, in-, dis-, non-) or spelt out next to it: the guards' word lists
# see no "not" here.
MORPH_NEGATIONS: tuple[tuple[str, str], ...] = (
    ("possible", "impossible"), ("allowed", "disallowed"), ("suitable", "unsuitable"), ("okay", "not okay"),
    ("required", "not required"), ("included", "not included"), ("accepted", "not accepted"),
    ("permitted", "not permitted"), ("paid", "unpaid"), ("limited", "unlimited"), ("able", "unable"),
    ("friendly", "unfriendly"), ("heated", "unheated"), ("cooked", "uncooked"), ("locked", "unlocked"),
    ("vegetarian", "non-vegetarian"), ("alcoholic", "non-alcoholic"), ("necessary", "unnecessary"),
    ("correct", "incorrect"), ("complete", "incomplete"), ("regular", "irregular"), ("responsible", "irresponsible"),
    ("honest", "dishonest"), ("connected", "disconnected"), ("continue", "discontinue"), ("qualify", "disqualify"),
    ("known", "unknown"), ("usual", "unusual"), ("fair", "unfair"), ("employed", "unemployed"),
    ("official", "unofficial"), ("secure", "insecure"), ("accessible", "inaccessible"), ("likely", "unlikely"),
    ("fit", "unfit"), ("free", "not free"), ("open", "not open"), ("working", "not working"),
    ("effective", "ineffective"), ("comfortable", "uncomfortable"), ("sure", "unsure"), ("common", "uncommon"),
)

# Words that may replace each other without changing the answer.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("buy", "purchase"), ("help", "assist"), ("get", "obtain"), ("need", "require"), ("fix", "repair"),
    ("begin", "commence"), ("finish", "complete"), ("big", "large"), ("small", "little"), ("quick", "fast"),
    ("car", "vehicle"), ("shop", "store"), ("change", "modify", "update"), ("delete", "erase"),
    ("show", "display"), ("find", "locate"), ("choose", "pick", "select"), ("cost", "price"), ("phone", "mobile"),
    ("movie", "film"), ("doctor", "physician"), ("kid", "child"), ("job", "position"), ("trip", "journey"),
    ("answer", "reply"), ("reach", "contact"), ("book", "reserve"), ("return", "send back"), ("error", "issue"),
    ("broken", "faulty"), ("email", "e-mail"), ("receive", "get"), ("check", "verify"), ("setup", "configure"),
    ("fee", "charge"), ("refund", "money back"), ("login", "sign in"), ("account", "profile"), ("quickly", "fast"),
    ("hours", "opening hours"), ("near", "close to"), ("apartment", "flat"), ("bill", "invoice"), ("shipping", "delivery"),
    ("parcel", "package"), ("speak to", "talk to"), ("cancel", "call off"), ("allowed", "permitted"),
    ("enough", "sufficient"), ("maybe", "perhaps"), ("rules", "policy"), ("medicine", "medication"),
)

CITIES = ("Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Prague", "Dublin", "Oslo", "Athens", "Tokyo",
          "Osaka", "Seoul", "Lima", "Quito", "Denver", "Boston", "Chicago", "Austin", "Seattle", "Toronto", "Sydney",
          "Perth", "Cairo", "Nairobi", "Delhi", "Mumbai", "Hanoi", "Manila", "Warsaw")
PEOPLE = ("Alice", "Bob", "Maria", "John", "Priya", "Chen", "Fatima", "Lucas", "Sofia", "Omar", "Emma", "Noah",
          "Aisha", "Diego", "Yuki", "Ivan", "Grace", "Mateo", "Leila", "Tom")
PRODUCTS = ("iPhone", "Pixel", "Galaxy", "Kindle", "PlayStation", "Xbox", "MacBook", "ThinkPad", "Roomba", "Fitbit",
            "Prius", "Corolla", "Model 3", "Surface", "Switch", "AirPods")
LANGUAGES = ("Spanish", "French", "German", "Italian", "Japanese", "Korean", "Portuguese", "Dutch", "Polish", "Hindi")
COMPANIES = ("Visa", "Mastercard", "PayPal", "Amex", "FedEx", "UPS", "DHL", "Gmail", "Outlook", "Slack", "Zoom",
             "Netflix", "Spotify", "Uber", "Airbnb")
ENTITY_CLASSES: dict[str, tuple[str, ...]] = {
    "city": CITIES, "person": PEOPLE, "product": PRODUCTS, "language": LANGUAGES, "company": COMPANIES,
}

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
RELATIVE_DAYS = ("today", "tomorrow", "yesterday", "tonight", "this week", "next week", "last week")

# Units of one quantity: swapping one for another changes the answer.
UNITS: tuple[tuple[str, ...], ...] = (
    ("kg", "lb", "grams", "ounces"), ("km", "miles", "meters", "feet"), ("hours", "minutes", "seconds", "days"),
    ("days", "weeks", "months", "years"), ("celsius", "fahrenheit"), ("dollars", "euros", "pounds", "yen"),
    ("GB", "MB", "TB"), ("liters", "gallons", "cups", "ml"), ("inches", "centimeters"), ("mph", "km/h"),
    ("teaspoons", "tablespoons"), ("watts", "volts", "amps"),
)

# Scope changes: a word that narrows or widens what the question covers, inserted or swapped.
SCOPE_SWAPS: tuple[tuple[str, str], ...] = (
    ("all", "some"), ("every", "any"), ("before", "after"), ("at least", "at most"), ("more than", "less than"),
    ("always", "sometimes"), ("everyone", "no one"), ("each", "one"), ("both", "either"), ("with", "without"),
    ("including", "excluding"), ("until", "since"), ("first", "last"), ("always", "never"), ("all", "none of the"),
    ("within", "after"), ("per day", "per week"), ("per person", "per group"), ("inside", "outside"),
)
SCOPE_INSERTS: tuple[str, ...] = ("only", "just", "all", "except", "also", "even", "both")

NEGATION_WORDS = ("not", "never", "no", "n't", "without", "none", "nobody", "nothing", "neither", "nor")

FILLERS_BEFORE = ("hi,", "hello,", "hey,", "quick question:", "sorry to bother you,", "hi there,", "um,", "excuse me,",
                  "good morning,", "one question:")
FILLERS_AFTER = ("thanks", "thank you", "please", "thx", "cheers", "asap", "thanks in advance", "any idea?", "help")


def split_of(entry: object, calibration_share: float = 0.25) -> str:
    """'train' or 'calibration', stable across runs and machines (a hash, not Python's seeded hash())."""
    digest = hashlib.sha256(repr(entry).encode("utf-8")).digest()
    return "calibration" if digest[0] / 256 < calibration_share else "train"


def in_split(entries: tuple[T, ...], split: str) -> tuple[T, ...]:
    """The entries of one split; 'all' keeps every entry."""
    return entries if split == "all" else tuple(entry for entry in entries if split_of(entry) == split)
