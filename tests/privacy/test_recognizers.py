"""The library-backed recognizers and the history's registered secrets, on the forms that leaked in
the independent review of issue 30 (own instances of each form), and on ordinary developer text
that must stay untouched."""

from __future__ import annotations

import base64

import pytest

from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.history_secrets import HistorySecretDetector, history_secrets
from specsteer.privacy.normalize import fold
from specsteer.privacy.pii import PiiDetector
from specsteer.privacy.recognizers import (
    CardRecognizer,
    NationalIdRecognizer,
    PhoneRecognizer,
    SecretRecognizer,
    WrappedEmailRecognizer,
    looks_random,
)
from specsteer.privacy.spans import ADDRESS, CARD, EMAIL, NATIONAL_ID, PHONE, SECRET

HISTORY = [
    "Add the deploy script.\n\n  DB_USER=app\n  DB_PASSWORD=Wq3!vR8#tLz2\n",
    "aws_access_key_id = AKIAQ2RT5XZ7MNB3KD4P\naws_secret_access_key = 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\n",
    "Use the bot token 5c2e9a71f04b3d86e1a7c9b2d4f60e35 for the release job.",
]


def spans_of(detector, text: str) -> list[tuple[str, str]]:
    return [(text[s.start : s.end], s.kind) for s in detector.find(text)]


@pytest.mark.parametrize(
    ("detector", "text", "span", "kind"),
    [
        (PiiDetector(), "ask m a r t a . v e g a @ e x a m p l e . o r g today", None, EMAIL),
        (PhoneRecognizer(), "call (+44) 20 7946 0321 today", "(+44) 20 7946 0321", PHONE),
        (PhoneRecognizer(), "call +(31) 6 2345 6789 today", "+(31) 6 2345 6789", PHONE),
        (PhoneRecognizer(), "call +49 171 234\n5678 today", "+49 171 234\n5678", PHONE),
        (PhoneRecognizer(), "call 06 41 22\n  87 19 today", "06 41 22\n  87 19", PHONE),
        (CardRecognizer(), "card 4539.1488.0343.6467 ok", "4539.1488.0343.6467", CARD),
        (PiiDetector(), "at Apt 4C, 19 Larchmont Road, Fairview, ok", "Apt 4C, 19 Larchmont Road, Fairview", ADDRESS),
        (NationalIdRecognizer(), "SSN 536-22-1842 on file", "536-22-1842", NATIONAL_ID),
        (NationalIdRecognizer(), "DNI 12345678Z on file", "12345678Z", NATIONAL_ID),
        (NationalIdRecognizer(), "NINO AB 12 34 56 C on file", "AB 12 34 56 C", NATIONAL_ID),
        (SecretRecognizer(), "key ghp_R2d9XqL7mN4vB8kT1sW6yZ3cP5fH0jA2eU9o here", None, SECRET),
        (SecretRecognizer(), "id AKIAJ7Q3ZK5RXW2MNB4T here", "AKIAJ7Q3ZK5RXW2MNB4T", SECRET),
        (SecretRecognizer(), 'set api_key: "h7Gk2Lq9Zx4Vb8Nm" now', "h7Gk2Lq9Zx4Vb8Nm", SECRET),
        (SecretRecognizer(), "Bearer eyJhbGciOiJSUzI1NiIsInR5cCI6Ik", "eyJhbGciOiJSUzI1NiIsInR5cCI6Ik", SECRET),
    ],
)
def test_the_review_forms_are_found(detector, text: str, span: str | None, kind: str) -> None:
    found = spans_of(detector, text)
    assert found and all(k == kind for _, k in found), found
    if span is not None:
        assert found[0][0] == span


def test_a_pin_in_another_scripts_digits_folds_to_ascii() -> None:
    assert fold("PIN ٤٨٢٩١٣ and ४८२९").text == "pin 482913 and 4829"


def test_spaced_out_letters_are_joined_and_map_back_to_the_raw_text() -> None:
    text = "to j  a  n  e  @  e x a m p l e . c o m ok"
    f = fold(text)
    assert "jane@" in f.text.replace(" ", "") and f.span(0, len(f.text)) == (0, len(text))


def test_a_private_key_body_is_a_secret_up_to_its_end_line() -> None:
    body = base64.b64encode(bytes(range(200))).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    text = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{lines}\n-----END OPENSSH PRIVATE KEY-----"
    found = SecretRecognizer().find(text)
    assert [(text[s.start : s.end]) for s in found] == [lines]
    assert SecretRecognizer().hazard(text[:80]) is not None


def test_an_address_wrapped_by_a_line_break_is_found() -> None:
    text = "write to lena.marsh@exam\nple.org soon"
    assert spans_of(WrappedEmailRecognizer(), text) == [("lena.marsh@exam\nple.org", EMAIL)]


def test_the_histories_secrets_are_registered_whole_in_pieces_and_encoded() -> None:
    secrets = history_secrets(HISTORY)
    assert {"Wq3!vR8#tLz2", "9xTq/B2mLr8ZkV4pW1sYc7Hn3Jd6Fg0Ea5Ub+Ro2", "5c2e9a71f04b3d86e1a7c9b2d4f60e35"} <= secrets
    d = HistorySecretDetector(secrets)
    token = "5c2e9a71f04b3d86e1a7c9b2d4f60e35"
    for text, piece in [
        ("the login is Wq3!vR8#tLz2 now", "Wq3!vR8#tLz2"),
        ("starts with 9xTq/B2mLr8Zk fine", "9xTq/B2mLr8Zk"),  # the first third of the cloud key
        (f"got {base64.b64encode(token.encode()).decode()} back", base64.b64encode(token.encode()).decode()),
        (f"Basic {base64.b64encode(b'ci:' + token.encode()).decode()} x", None),
    ]:
        found = [text[s.start : s.end] for s in d.find(text)]
        assert found, text
        if piece is not None:
            assert found == [piece]
    split = "first Wq3!vR and then 8#tLz2 please"
    assert [split[s.start : s.end] for s in d.find(split)] == ["Wq3!vR", "8#tLz2"]


@pytest.mark.parametrize(
    "text",
    [
        "Bump to 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 now",
        "commit 64fc4c2cdd4db2645eaabb47aa4bac820b03cdba fixed it",
        "request 3f2b8c1e-9d4a-4e7b-a6c5-0b1d2e3f4a5b failed",
        "clone git@github.com:git/git.git and ssh://git@git.kernel.org/pub/scm/git/git.git",
        "see https://docs.python.org/3/library/asyncio-task.html#asyncio.wait_for",
        "AbstractRequestHandlerFactoryBean and /usr/lib/x86_64-linux-gnu/libssl.so.3",
        "see @pytest.mark.parametrize, Python 3.11.4, 127.0.0.1:8080, 1712345678 ms",
        "the password is required and GITHUB_TOKEN is read from the environment",
    ],
)
def test_ordinary_developer_text_is_not_sensitive(text: str) -> None:
    detectors = [PiiDetector(), PhoneRecognizer(), CardRecognizer(), NationalIdRecognizer(), SecretRecognizer()]
    assert [spans_of(d, text) for d in detectors] == [[]] * len(detectors)


def test_a_long_hash_is_not_held_as_an_address_local_part(char_tok) -> None:
    guard = EgressGuard.for_profile([], char_tok)
    for prefix in ("see 9f86d081884c7d659a2f", "id 3f2b8c1e-9d4a-4e7b"):
        assert guard.hazard("", prefix) is None, prefix


def test_random_words_and_identifiers() -> None:
    assert looks_random("Zq8Xv2Lm9Tb4Wn7Kc3Rd")
    assert not looks_random("AbstractRequestHandlerFactoryBean")
    assert not looks_random("9f86d081884c7d659a2feaa0c55ad015")


def test_a_piece_of_a_long_registered_encoding_is_still_found() -> None:
    from specsteer.privacy.canaries import CanaryDetector

    email = "rosalind.whitcombe@example.invalid"
    d = CanaryDetector({email: EMAIL})
    tail = email.encode().hex()[30:]  # what reaches the guard after a fail-closed hold on the head
    text = f"then {tail} ends"
    assert [text[s.start : s.end] for s in d.find(text)] == [tail]
    assert CanaryDetector({"someone.else@corp.test": EMAIL}).find(text) == []
