"""The related-entities guard: two siblings of one kind, or the same two linked the other way,
never share an answer; one member spelled two ways, or two members merely listed, do."""

import pytest

from workers.cache.guards import meaning_conflict
from workers.cache.related_entities import mentions, related_conflict


@pytest.mark.parametrize(("a", "b"), [
    ("My fridge is making a buzzing noise, is it safe?", "My freezer is making a buzzing noise, is it safe?"),
    ("Can I take ibuprofen with this?", "Can I take paracetamol with this?"),
    ("How do I close my checking account?", "How do I close my savings account?"),
    ("Does my car insurance cover a windscreen?", "Does my home insurance cover a windscreen?"),
    ("Can I pay the deposit in cash?", "Can I pay the deposit by cheque?"),
])
def test_siblings_of_one_kind_conflict(a: str, b: str) -> None:
    found = meaning_conflict(a, b)
    assert found is not None and found.startswith("related entities differ"), found


@pytest.mark.parametrize(("a", "b"), [
    ("Can I use my Chrome bookmarks in Firefox?", "Can I use my Firefox bookmarks in Chrome?"),
    ("Move money from my savings account to checking", "Move money from checking to my savings"),
    ("How do I convert dollars to euros?", "How do I convert euros to dollars?"),
    ("Cheapest flights from Paris to London", "Cheapest flights London to Paris"),
])
def test_the_same_two_linked_the_other_way_conflict(a: str, b: str) -> None:
    found = meaning_conflict(a, b)
    assert found is not None and found.startswith("roles swapped"), found


@pytest.mark.parametrize(("a", "b"), [
    ("My fridge is leaking", "My refrigerator is leaking"),
    ("Is wi-fi free on the train?", "Is there free wifi on trains?"),
    ("Can I bring a carry-on?", "Can I bring hand luggage?"),
    ("Do I need a credit card to rent a car, or is a debit card OK?",
     "Can I rent a car with a debit card instead of a credit card?"),
    ("How many words can my essay have?", "What is the word limit for the essay?"),
    ("My fridge is buzzing", "My appliance is buzzing"),
])
def test_one_member_two_spellings_a_listing_or_a_single_side_pass(a: str, b: str) -> None:
    assert related_conflict(mentions(a), mentions(b)) is None


def test_a_longer_member_hides_the_shorter_inside_it_and_capitalised_members_match_as_written() -> None:
    named = mentions("Open a savings account and a Word document; word of mouth helped").named
    assert [m.member for m in named] == ["savings account", "word"]
    assert [m.at for m in named] == [7, 29]


@pytest.mark.parametrize(("a", "b"), [
    ("What does it mean if my payment was authorized?", "What does it mean if my payment was unauthorized?"),
    ("Why is my order eligible for a return?", "Why is my order ineligible for a return?"),
    ("Is the deposit refundable?", "Is the deposit non-refundable?"),
])
def test_a_word_negated_by_its_prefix_conflicts(a: str, b: str) -> None:
    found = meaning_conflict(a, b)
    assert found is not None and found.startswith(("negating prefix", "negation")), found


def test_a_prefix_that_makes_another_word_is_not_a_negation() -> None:
    assert meaning_conflict("How do I install the app?", "How do I reinstall the app?") is None


@pytest.mark.parametrize(("a", "b"), [
    ("What was my bank balance at the end of the month?", "What will my bank balance be at the end of the month?"),
    ("How many gigabytes of cloud storage do I get?", "How many terabytes of cloud storage do I get?"),
])
def test_another_tense_or_unit_conflicts(a: str, b: str) -> None:
    assert meaning_conflict(a, b) is not None
