"""Related entities: things of one kind whose answers differ although their sentences do not.

"My fridge is buzzing" and "my freezer is buzzing" embed a hair apart, and so do "move my
Chrome bookmarks to Firefox" and "move my Firefox bookmarks to Chrome": the one word that
changes the answer is a sibling of the other (two appliances, two browsers), and a
cross-encoder trained on generated pairs reads such a swap as a paraphrase about as often as
not. Two rules, over groups of siblings:

- **swapped sibling**: both texts name members of one group, and not the same members;
- **swapped roles**: both texts link the same two members of one group by a direction, each
  the other way ("from savings to checking" vs "from checking to savings", "Chrome bookmarks
  in Firefox" vs "Firefox bookmarks in Chrome"); two members merely listed ("a credit card, or
  is a debit card OK?" vs "a debit card instead of a credit card") are not a swap.

A text that names no member of a group says nothing about it ("my fridge is buzzing" against
"my appliance is buzzing" passes: the verifier decides). Capitalised members (Word, Edge,
Teams) match only as written, so the everyday words do not count.

The guard errs towards refusing: a paraphrase that names a sibling for its own sake ("my
jacket" for "my coat" is spelled as one member; "laptop" for "tablet" is not) costs a cache
hit, never a wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from workers.cache.role_swap import DIRECTIONS

# One tuple per kind of thing; "a|b" spells one member two ways (the first is its name).
GROUPS: tuple[tuple[str, ...], ...] = (
    # home and appliances
    ("fridge|refrigerator", "freezer", "dishwasher", "oven", "microwave", "stove", "hob"),
    ("washing machine|washer", "dryer|tumble dryer"),
    ("kettle", "toaster", "coffee machine", "blender"),
    ("boiler", "heater", "air conditioner|air conditioning", "radiator", "heat pump", "thermostat"),
    ("kitchen", "bathroom", "bedroom", "living room", "garage", "basement", "attic"),
    ("sofa|couch", "bed", "mattress", "wardrobe", "desk"),
    ("landlord", "tenant", "neighbour|neighbor", "letting agent"),
    ("electricity", "gas", "water", "broadband"),
    # money
    ("debit card", "credit card", "gift card", "prepaid card"),
    ("checking account|checking", "savings account|savings", "joint account", "current account", "business account"),
    ("mortgage", "car loan", "personal loan", "student loan", "overdraft"),
    ("cash", "cheque", "bank transfer|wire transfer"),
    ("income tax", "property tax", "council tax", "sales tax", "VAT"),
    ("child benefit", "housing benefit", "unemployment benefit", "state pension"),
    ("invoice", "receipt", "payslip|pay stub"),
    ("refund", "exchange", "store credit", "replacement", "repair"),
    ("car insurance", "home insurance", "travel insurance", "health insurance", "pet insurance",
     "life insurance", "dental insurance"),
    # devices and software
    ("iPhone", "iPad", "Apple Watch", "MacBook", "iMac", "AirPods"),
    ("laptop", "tablet", "desktop", "smartwatch"),
    ("Chrome", "Firefox", "Safari", "Edge", "Opera"),
    ("Windows", "macOS|Mac OS", "Linux", "Android", "iOS", "ChromeOS"),
    ("Word", "Excel", "PowerPoint", "OneNote"),
    ("Gmail", "Outlook", "Yahoo Mail"),
    ("Teams", "Slack", "Zoom", "Skype", "Webex"),
    ("Facebook", "Instagram", "TikTok", "LinkedIn", "WhatsApp", "Snapchat", "YouTube"),
    ("GitHub", "GitLab", "Bitbucket"),
    ("PostgreSQL|Postgres", "MySQL", "SQLite", "MongoDB", "Redis"),
    ("Python", "Java", "JavaScript", "TypeScript", "Ruby", "Rust"),
    ("wifi|wi-fi", "bluetooth", "ethernet", "mobile data", "hotspot"),
    ("hard drive", "SSD", "USB stick", "SD card|memory card"),
    ("printer", "scanner", "monitor", "keyboard", "router", "webcam"),
    ("Netflix", "Spotify", "Disney+", "Hulu", "Prime Video"),
    # places and currencies: the guards' country and currency lists catch a swapped one, these the order
    ("USA|US|United States|America", "Canada", "Mexico", "UK|United Kingdom|Britain", "Ireland", "France",
     "Germany", "Spain", "Portugal", "Italy", "Netherlands", "Switzerland", "Poland", "Sweden", "India",
     "China", "Japan", "Australia", "New Zealand"),
    ("London", "Paris", "Berlin", "Madrid", "Rome", "Amsterdam", "Dublin", "New York", "Boston", "Chicago",
     "San Francisco", "Los Angeles", "Toronto", "Sydney", "Tokyo"),
    ("dollar|USD", "euro|EUR", "pound|GBP|sterling", "yen|JPY"),
    # travel
    ("flight|plane", "train", "bus|coach", "ferry"),
    ("taxi", "tram", "subway|metro|underground"),
    ("passport", "visa", "ID card", "residence permit", "driving licence|driver's license|driver license",
     "birth certificate"),
    ("window seat", "aisle seat", "middle seat"),
    ("economy class", "business class", "first class", "premium economy"),
    ("single room", "double room", "twin room", "suite"),
    ("carry-on|hand luggage", "checked bag|checked luggage|checked baggage"),
    ("car", "motorbike|motorcycle", "bike|bicycle", "scooter", "van", "truck"),
    ("petrol", "diesel", "hybrid"),
    ("arrivals", "departures"),
    # health
    ("ibuprofen", "paracetamol|acetaminophen", "aspirin", "codeine", "naproxen"),
    ("antibiotics", "antihistamines", "painkillers", "steroids", "antidepressants"),
    ("flu vaccine|flu shot|flu jab", "covid booster", "tetanus shot", "measles vaccine"),
    ("dentist", "optician", "GP|doctor", "physiotherapist", "pharmacist", "surgeon", "nurse"),
    ("knee", "ankle", "wrist", "shoulder", "elbow", "hip"),
    ("blood test", "urine test", "x-ray", "MRI", "CT scan", "ultrasound"),
    # people, school, work
    ("teacher", "student", "tutor", "principal"),
    ("math|maths", "physics", "chemistry", "biology", "history", "geography"),
    ("midterm", "final exam", "quiz", "essay", "coursework"),
    ("bachelor's", "master's", "PhD", "diploma"),
    ("primary school|elementary school", "secondary school", "high school", "middle school", "university|college"),
    ("payroll", "IT department", "HR", "finance", "legal"),
    ("sick leave", "parental leave", "maternity leave", "paternity leave", "annual leave", "unpaid leave"),
    ("employee", "contractor", "intern", "manager"),
    # food, shops, animals, clothes
    ("breakfast", "lunch", "dinner|supper"),
    ("coffee", "tea", "alcohol", "wine", "beer", "juice"),
    ("bread", "rice", "pasta", "chicken", "fish", "eggs", "beef", "pork"),
    ("milk", "cheese", "yogurt|yoghurt", "butter"),
    ("peanuts", "tree nuts", "gluten", "shellfish", "soy"),
    ("supermarket", "pharmacy", "bakery", "post office"),
    ("dog", "cat", "rabbit", "hamster", "parrot"),
    ("jacket|coat", "shoes", "boots", "jeans", "dress", "shirt"),
)


@dataclass(frozen=True)
class Mention:
    group: int
    member: str
    at: int


@dataclass(frozen=True)
class Mentions:
    """The members a text names, in the order they first appear, and which of them it links
    with a direction ("from savings to checking", "Chrome bookmarks in Firefox")."""

    named: tuple[Mention, ...]
    directed: frozenset[tuple[int, str, str]]


def mentions(text: str) -> Mentions:
    found: dict[tuple[int, str], Mention] = {}
    spans: list[tuple[Mention, int]] = []
    for pattern, members in _matchers():
        for match in pattern.finditer(text):
            if any(mention.at < match.end() and match.start() < end for mention, end in spans):
                continue
            body = _spelling(match.group("body"))
            group, name = members.get(body) or members[body.lower()]
            mention = Mention(group, name, match.start())
            spans.append((mention, match.end()))
            found.setdefault((group, name), mention)
    spans.sort(key=lambda item: item[0].at)
    directed = frozenset(
        (first.group, first.member, second.member)
        for (first, first_end), (second, _) in zip(spans, spans[1:])
        if first.group == second.group and first.member != second.member
        and _DIRECTION.fullmatch(text[first_end:second.at])
    )
    return Mentions(tuple(sorted(found.values(), key=lambda mention: mention.at)), directed)


def related_conflict(a: Mentions, b: Mentions) -> str | None:
    """Why two texts' mentions say they need different answers, or None."""
    for group in {m.group for m in a.named} & {m.group for m in b.named}:
        in_a = {m.member for m in a.named if m.group == group}
        in_b = {m.member for m in b.named if m.group == group}
        if in_a != in_b:
            return f"related entities differ: {sorted(in_a ^ in_b)}"
    for group, first, second in a.directed:
        if (group, second, first) in b.directed and (group, first, second) not in b.directed:
            return f"roles swapped: {first} -> {second} in one text, {second} -> {first} in the other"
    return None


# What may stand between two members for the text to read as going from the first to the second:
# a few words at most, one of them a direction word, or a place word between two named things
# ("Chrome bookmarks in Firefox").
_DIRECTION = re.compile(
    rf"(?:\W+\w+){{0,3}}?\W+(?:{'|'.join(sorted(DIRECTIONS | {'in', 'on', 'over', 'towards'}))})(?:\W+\w+){{0,3}}?\W+",
    re.IGNORECASE)


def _spelling(text: str) -> str:
    return re.sub(r"[\s-]+", " ", text)


@cache
def _matchers() -> tuple[tuple[re.Pattern[str], dict[str, tuple[int, str]]], ...]:
    """One alternation for the lower-case members (any case) and one for the capitalised ones."""
    any_case: dict[str, tuple[int, str]] = {}
    as_written: dict[str, tuple[int, str]] = {}
    for group, members in enumerate(GROUPS):
        for member in members:
            name = member.split("|")[0].lower()
            for spelling in member.split("|"):
                cased = any(ch.isupper() for ch in spelling)
                table = as_written if cased else any_case
                table[_spelling(spelling if cased else spelling.lower())] = (group, name)
    return (_alternation(any_case, re.IGNORECASE), any_case), (_alternation(as_written, 0), as_written)


def _alternation(spellings: dict[str, tuple[int, str]], flags: int) -> re.Pattern[str]:
    # Longest first: at one position "savings account" wins over "savings".
    bodies = (r"[\s-]+".join(re.escape(part) for part in spelling.split()) for spelling in
              sorted(spellings, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?P<body>{'|'.join(bodies)})(?:s|es)?(?![\w-])", flags)
