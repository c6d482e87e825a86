"""One question written twice needs no verifier; the same words on the other sides of a
direction word are a different question."""

import pytest

from workers.cache.guards import meaning_conflict
from workers.cache.role_swap import swapped_roles
from models.same_question import same_question


@pytest.mark.parametrize(("a", "b"), [
    ("how do i cancel my internet subscription", "How do I cancel my internet subscription?"),
    ("Whats the deadline to apply for a tax extension?", "What\u2019s the deadline to apply for a tax extension?"),
    ("Can I bring a carry-on and a personal item?", "Can I bring a carry on and a personal item?"),
    ("My parcel is marked delivered but I never got it", "My parcel is marked as delivered but I never got it."),
    ("HOW DO I RESET MY ONLINE BANKING PASSWORD", "How do I reset my online banking password?"),
])
def test_the_same_question_written_twice(a: str, b: str) -> None:
    assert same_question(a, b)


@pytest.mark.parametrize(("a", "b"), [
    ("Is it 1.5 litres?", "Is it 15 litres?"),
    ("Is it -5 outside?", "Is it 5 outside?"),
    ("Can I cancel my order?", "Can't I cancel my order?"),
    ("How do I reset my password?", "How do I reset my PIN?"),
])
def test_a_different_question_is_not_the_same_question(a: str, b: str) -> None:
    assert not same_question(a, b)


@pytest.mark.parametrize(("a", "b"), [
    ("How do I merge the develop branch into main?", "How do I merge main into the develop branch?"),
    ("How do I switch my number from prepaid to a contract plan?",
     "How do I switch my number from a contract plan to prepaid?"),
    ("Is it okay to give my dog food that's meant for cats?", "Is it okay to give my cat food that's meant for dogs?"),
    ("Did Sarah lend money to Tom?", "Did Tom lend money to Sarah?"),
])
def test_words_trading_sides_of_a_direction_are_swapped_roles(a: str, b: str) -> None:
    assert swapped_roles(a, b) is not None
    assert meaning_conflict(a, b) is not None


@pytest.mark.parametrize(("a", "b"), [
    ("how do i register to vote after moving to a new town?", "I moved to another town, how can I sign up to vote there?"),
    ("Can I switch from monthly to annual billing?", "How do I change my billing from monthly to annual?"),
    ("Do I need a credit card to rent a car, or is a debit card OK?",
     "Can I rent a car with a debit card instead of a credit card?"),
    ("what's the easiest way to get from the airport to the city centre late at night?",
     "Arriving late at night - how do I best get from the airport into downtown?"),
])
def test_clauses_that_move_are_not_swapped_roles(a: str, b: str) -> None:
    assert swapped_roles(a, b) is None
