"""The semantic cache's guards: texts that differ in a number, negation, opposite or entity
never share an answer; paraphrases without such a difference pass."""

import json

import pytest

from tests.paths import REPO_ROOT
from workers.cache.guards import meaning_conflict

PAIRS = REPO_ROOT / "workers" / "cache" / "data" / "semantic_pairs.json"


@pytest.mark.parametrize(("a", "b", "reason"), [
    ("Can I schedule a delivery for 7 am?", "Can I schedule a delivery for 7 pm?", "numbers"),
    ("Set a reminder at 7:30 a.m.", "Set a reminder at 7:30 p.m.", "numbers"),
    ("I was charged 100 dollars", "I was charged 1000 dollars", "numbers"),
    ("I was charged $1,000", "I was charged $100", "numbers"),
    ("Can I return it after three days?", "Can I return it after thirty days?", "numbers"),
    ("My order was due on March 3", "My order was due on March 13", "numbers"),
    ("Where is order #48213?", "Where is order #48231?", "numbers"),
])
def test_different_numbers_conflict(a: str, b: str, reason: str) -> None:
    found = meaning_conflict(a, b)
    assert found is not None and found.startswith(reason)


@pytest.mark.parametrize(("a", "b"), [
    ("Can I change my order?", "Can't I change my order?"),
    ("Can I change my order?", "Can’t I change my order?"),  # typographic apostrophe
    ("My refund has arrived", "My refund has not arrived"),
    ("I received the package", "I never received the package"),
    ("Can I order with an account?", "Can I order without an account?"),
    ("I can update my card", "I'm unable to update my card"),
    ("The promo code works", "the promo code dont work"),
])
def test_negation_in_one_text_conflicts(a: str, b: str) -> None:
    assert meaning_conflict(a, b) == "negation in one text only"


@pytest.mark.parametrize(("a", "b"), [
    ("How do I enable 2FA?", "How do I disable 2FA?"),
    ("How do I turn on two-factor authentication?", "How do I turn off 2FA?"),
    ("How do I add a payment method?", "How do I remove a payment method?"),
    ("Can I increase my limit?", "Can I decrease my limit?"),
    ("How do I cancel my subscription?", "How do I renew my subscription?"),
    ("How do I upgrade my plan?", "How do I downgrade my plan?"),
    ("How do I log in?", "How do I log out?"),
    ("Can I change my order before it ships?", "Can I change my order after it ships?"),
    ("How do I open a ticket?", "How do I close a ticket?"),
])
def test_opposites_conflict(a: str, b: str) -> None:
    found = meaning_conflict(a, b)
    assert found is not None and found.startswith("opposites")


@pytest.mark.parametrize(("a", "b"), [
    # The yes/no answer flips with no negation word. The verifier built with constraints.txt's libraries
    # serves the first three and the last two (P(same) above its threshold) one way round or the other.
    ("Should I avoid leaving the heater on overnight?", "Is it safe to leave the heater on overnight?"),
    ("Should I avoid eating raw eggs while pregnant?", "Is it safe to eat raw eggs while pregnant?"),
    ("Do I need to avoid running after a flu shot?", "Is running after a flu shot allowed?"),
    ("Is it forbidden to bring liquids through security?", "Am I allowed to bring liquids through security?"),
    ("Is it dangerous to charge my phone overnight?", "Is it fine to charge my phone overnight?"),
    ("Is it risky to leave my laptop plugged in all the time?", "Is it okay to leave my laptop plugged in?"),
    ("Should I stop leaving the heater on overnight?", "Is it safe to leave the heater on overnight?"),
    ("Is leaving the heater on overnight a fire hazard?", "Is it safe to leave the heater on overnight?"),
])
def test_polarity_of_a_yes_no_question_conflicts(a: str, b: str) -> None:
    for first, second in ((a, b), (b, a)):
        found = meaning_conflict(first, second)
        assert found is not None and found.startswith("opposites"), (first, second)


def test_the_same_polarity_worded_apart_passes() -> None:
    assert meaning_conflict("Is it safe to leave the heater on overnight?",
                            "Can I safely leave the heater on overnight?") is None
    assert meaning_conflict("Should I avoid raw eggs while pregnant?",
                            "Do pregnant women need to avoid raw eggs?") is None


@pytest.mark.parametrize(("a", "b"), [
    ("Do you ship to Canada?", "Do you ship to Mexico?"),
    ("Can I pay with PayPal?", "Can I pay with Venmo?"),
    ("The app crashes on my iPhone", "The app crashes on my Android phone"),
    ("Send the invoice to anna@example.com", "Send the invoice to ben@example.com"),
    ("Where is order A1043?", "Where is order B1043?"),
    ("Can I pay in euros?", "Can I pay in dollars?"),
    ("do you ship to germany", "do you ship to france"),  # lower case: caught by the country list
    ("How do I change my username?", "How do I change my password?"),
])
def test_different_entities_conflict(a: str, b: str) -> None:
    assert meaning_conflict(a, b) is not None


@pytest.mark.parametrize(("a", "b"), [
    ("How do I reset my password?", "how can i reset my password"),
    ("HOW DO I RESET MY PASSWORD", "How do I reset my password?"),
    ("How do I turn on 2FA?", "How do I enable two-factor authentication?"),
    ("I was charged twice", "I was double charged"),
    ("Can I return it after 30 days?", "Can I return it after thirty days?"),
    ("I paid $25", "I paid twenty-five dollars"),
    ("Deliveries start at 7 am", "Deliveries start at 7:00 a.m."),
    ("I can't log in", "I cannot log in to my account"),
    ("How do I change my email address?", "How can I update the email on my account?"),
    ("Can I pay with PayPal?", "Do you accept PayPal?"),
    ("Ship to Germany?", "Do you deliver to Germany"),
])
def test_paraphrases_without_critical_differences_pass(a: str, b: str) -> None:
    assert meaning_conflict(a, b) is None


def test_a_lone_one_is_a_pronoun_not_a_number() -> None:
    assert meaning_conflict("Switch me to the cheaper one", "Switch me to the cheaper plan") is None
    assert meaning_conflict("I need one hundred units", "I need 100 units") is None


def test_the_guard_is_symmetric_on_the_evaluation_set() -> None:
    data = json.loads(PAIRS.read_text(encoding="utf-8"))
    for pair in data["paraphrases"] + data["near_misses"]:
        assert (meaning_conflict(pair["a"], pair["b"]) is None) == (meaning_conflict(pair["b"], pair["a"]) is None), pair


def test_the_evaluation_set_is_large_enough_and_tagged() -> None:
    data = json.loads(PAIRS.read_text(encoding="utf-8"))
    assert len(data["paraphrases"]) >= 120 and len(data["near_misses"]) >= 120
    kinds = {pair["kind"] for pair in data["near_misses"]}
    assert kinds == {"number", "negation", "opposite", "entity"}
    flagged = sum(meaning_conflict(p["a"], p["b"]) is not None for p in data["near_misses"] if p["split"] == "dev")
    assert flagged / sum(p["split"] == "dev" for p in data["near_misses"]) >= 0.95


@pytest.mark.parametrize(("a", "b"), [("买两件打几折", "买三件打几折"), ("这个商品保修一年吗？", "这个商品保修三年吗？"),
                                      ("第一次下单有优惠吗", "第二次下单有优惠吗"), ("满两百减三十", "满两百减二十")])
def test_chinese_numerals_that_differ_are_a_conflict(a: str, b: str) -> None:
    reason = meaning_conflict(a, b)
    assert reason is not None and reason.startswith("numbers differ")


@pytest.mark.parametrize(("a", "b"), [("退款申请了3天了还没到账", "三天前申请的退款现在还没到"),
                                      ("满200减30的券怎么用", "满两百减三十的优惠券如何使用"),
                                      ("帮我查一下订单", "帮我查查订单"), ("二〇二四年的发票", "2024年的发票")])
def test_chinese_numerals_and_digits_of_the_same_value_agree_and_a_lone_yi_is_no_count(a: str, b: str) -> None:
    assert meaning_conflict(a, b) is None


def test_every_check_that_fires_is_named_in_order_and_the_first_is_the_reason() -> None:
    from workers.cache.guards import CHECKS, conflict_between, conflicts, features

    fa, fb = features("i did not get my 3 parcels in june"), features("i got my 4 parcels in july")
    found = list(conflicts(fa, fb))
    assert [name for name, _ in found] == ["numbers", "negation", "critical:month"]
    assert conflict_between(fa, fb) == found[0][1] == "numbers differ: ['3'] vs ['4']"
    names = [name for name, _ in CHECKS]
    assert names[:6] == ["identifiers", "numbers", "negation", "negating prefix", "opposites", "proper noun"]
    assert names[-2:] == ["related entities", "roles"] and "exclusive:account field" in names
    assert list(conflicts(features("How do I reset my password?"), features("How can I reset my password?"))) == []


def test_before_a_verifier_only_the_checks_that_earned_their_place_run() -> None:
    from workers.cache.guards import verified_conflict

    negation = ("Is the gym open on Sunday?", "Is the gym not open on Sunday?")
    assert meaning_conflict(*negation) == "negation in one text only"
    assert verified_conflict(*negation) is None, "the verifier judges negation: the word list cost should-hits"
    assert verified_conflict("Can I return 2 items?", "Can I return 3 items?") == meaning_conflict(
        "Can I return 2 items?", "Can I return 3 items?")
    assert verified_conflict("Is it open today?", "Is it open tomorrow?") is not None
    assert verified_conflict("My fridge is buzzing", "My freezer is buzzing") is not None
    assert verified_conflict("Track order AB123", "Track order AB124") is not None
