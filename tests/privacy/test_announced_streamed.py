"""Leak forms of attack 12 drafted through the whole guard (`EgressGuard.for_profile` with an
empty history, so only the pattern detectors and recognizers act) and `plan_uplink`, one character
a round up to four: no character of the span may go up, and an ordinary sentence with the same
keywords goes up whole."""

from __future__ import annotations

import pytest

from specsteer.privacy.guard import EgressGuard
from tests.privacy.test_streamed_leak_forms import leaked


@pytest.fixture(scope="module")
def guard(char_tok) -> EgressGuard:
    return EgressGuard.for_profile([], char_tok).for_prompt("Write the commit body.")


STREAMED = [
    ("Set up the flat; the wifi password is Bluebird2018? for guests.", "Bluebird2018?"),
    ("Open with garage pin 4383 tonight.", "4383"),
    ("I was born 25 July 2004 in Porto.", "25 July 2004"),
    ("Pay me: sort code 66-04-87, account 64759382 thanks", "66-04-87, account 64759382"),
    ("My laptop MAC is 61-7c-08-8a-3b-70 on the LAN.", "61-7c-08-8a-3b-70"),
    ("Reach my box at 192 dot 168 dot 39 dot 192 later.", "192 dot 168 dot 39 dot 192"),
    ("Send it to P.O. Box 6622, Kingsbridge soon.", "P.O. Box 6622, Kingsbridge"),
    ("I live at Quayside Street 196, Unit 8B, Fairview now.", "Quayside Street 196, Unit 8B, Fairview"),
    ("Call my cell 8662487647 after six.", "8662487647"),
    ("Cabin GPS 26.1214 S, 52.8430 E by the lake.", "26.1214 S, 52.8430 E"),
    (
        "Recovery words:\n1. castle 2. zebra 3. fossil 4. inmate 5. harvest 6. clinic 7. apple 8. bamboo"
        " 9. mosquito 10. salmon 11. raccoon 12. elbow\nKeep it offline.",
        "1. castle 2. zebra 3. fossil 4. inmate 5. harvest 6. clinic 7. apple 8. bamboo"
        " 9. mosquito 10. salmon 11. raccoon 12. elbow",
    ),
    ("Meu CPF: 171.877.278-52 ok", "171.877.278-52"),
    ("Passport no. 01MU33842 expires soon.", "01MU33842"),
    ("The authenticator secret is HT5W JLKQ QSTO JLBD for now.", "HT5W JLKQ QSTO JLBD"),
    ("Use api key is pys7t0r04j9w6xru861wpmbfzd8t422g today.", "pys7t0r04j9w6xru861wpmbfzd8t422g"),
    ("Ping https://wa.me/338551590042 today.", "wa.me/338551590042"),
    ("Pay to IBAN DE89.3704.0044.0532.0130.00 today.", "DE89.3704.0044.0532.0130.00"),
    (
        "Words: butter, upset, before, crisp, sign, gravity, lunch, resource, valid, find, habit, zoo done",
        "butter, upset, before, crisp, sign, gravity, lunch, resource, valid, find, habit, zoo",
    ),
    ("Token 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 for the shop.", "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"),
    (
        "Backup: share struggle believe loyal web soon opera village resemble hurt elder motion ok",
        "share struggle believe loyal web soon opera village resemble hurt elder motion",
    ),
]


@pytest.mark.parametrize(("text", "span"), STREAMED)
def test_no_character_goes_up_while_the_span_is_written(guard: EgressGuard, char_tok, text: str, span: str) -> None:
    a = text.index(span)
    assert leaked(guard, char_tok, text, [(a, a + len(span))]) == ""


def test_an_ordinary_sentence_still_goes_up_whole(guard: EgressGuard, char_tok) -> None:
    text = "Fix the build: the password is read from the keychain, born of a bug in code 1234."
    assert leaked(guard, char_tok, text, [(0, len(text))]) == text
