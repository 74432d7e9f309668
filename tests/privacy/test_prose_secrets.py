"""Issue #49, findings 1 and 5: secrets a history states in prose are registered, and a registered
secret is held as a whole, never by the prefix it shares with ordinary developer text."""

from __future__ import annotations

import codecs

import pytest

from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.history_secrets import HistorySecretDetector
from tests.privacy.test_guard_attack_forms import held, leaked

PROSE = [
    "Wifi at the cabin: password is Fjordlys-2291. NAS admin / Sunflower!1987.",
    "Reminder: the house alarm code 4417 was set last week.",
    "Keep it offline, passphrase: correct horse battery staple",
]


def forms(value: str) -> list[str]:
    """As is, ROT13, reversed, hex, spaced out, and the first half."""
    return [
        value,
        codecs.encode(value, "rot13"),
        value[::-1],
        value.encode().hex(),
        " ".join(value),
        value[: (len(value) + 1) // 2],
    ]


def test_prose_secrets_are_registered_whole() -> None:
    d = HistorySecretDetector.from_history(PROSE)
    assert {"fjordlys-2291", "sunflower!1987", "correct horse battery staple"} <= set(d.secrets)
    assert d.pins == ("4417",)
    for text, value in [
        ("PIN: 4417", "4417"),
        ("door code is 90215", "90215"),
        ("pw Tr0ub4dor&3x", "tr0ub4dor&3x"),
        ("export DB_PASSWORD=Kj8#rain-Moss", "kj8#rain-moss"),
        ("login: root / Quartz!Owl42", "quartz!owl42"),
    ]:
        d = HistorySecretDetector.from_history([text])
        assert value in (*d.secrets, *d.pins), text
    # No generic piece: never "password", never "https://", never a vendor's prefix alone.
    assert all(len(s) >= 8 for s in HistorySecretDetector.from_history(PROSE).secrets)


@pytest.mark.parametrize(
    "text",
    [
        "The password is required. Reset your password in settings, then log in as admin / root.",
        "Password: see the vault. PIN: 1234. The passphrase: is set in the config. code 4417 of the spec.",
        "TOKEN_URL=https://auth.example.com/oauth2/token and PASSWORD_MIN_LENGTH=12 and LOG_LEVEL=debug-2",
    ],
)
def test_ordinary_text_about_passwords_registers_nothing(text: str) -> None:
    d = HistorySecretDetector.from_history([text])
    assert d.secrets == () and d.pins == (), d.secrets


@pytest.mark.parametrize(
    ("value", "which"),
    [
        ("Fjordlys-2291", range(6)),
        ("Sunflower!1987", range(6)),
        ("correct horse battery staple", range(6)),
        ("4417", range(5)),  # a PIN's half is two digits: no secret alone
    ],
)
def test_each_form_of_a_prose_secret_is_held(char_tok, value: str, which: range) -> None:
    guard = EgressGuard.for_profile(PROSE, char_tok).for_prompt("Write the note.")
    for i in which:
        form = forms(value)[i]
        text = f"Note for later: {form} and that is all."
        spans = guard.inspect("", text)
        start = text.index(form)
        assert any(s.start <= start and s.end >= start + len(form.rstrip()) for s in spans), (form, spans)


def test_a_prose_secret_drafted_later_does_not_go_up(bpe_tok) -> None:
    guard = EgressGuard.for_profile(PROSE, bpe_tok).for_prompt("Write the note.")
    text = "The cabin wifi is Fjordlys-2291 and the NAS is fine."
    assert leaked(guard, bpe_tok, text, "Fjordlys-2291") == ""


WEBHOOK = "https://hooks.slack.com/services/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"
GH_TOKEN = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
GH_PAT = "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuV"


@pytest.mark.parametrize(
    ("history", "text"),
    [
        ([f"Alerts go to {WEBHOOK}"], "See https://example.com/docs and https://pypi.org/project/x for more."),
        ([f"export GITHUB_TOKEN={GH_TOKEN}"], "Set GITHUB_TOKEN in the workflow env before the run."),
        ([f"export GITHUB_TOKEN={GH_PAT}"], "Set GITHUB_TOKEN in the workflow env before the run."),
        ([], "Deploy with AWS_REGION=eu-west-1 and export AWS_DEFAULT_REGION=us-east-2 today."),
        ([], "- uses: actions/checkout@8e5e7e5ab8b370d6c329ec480221332ada57f0ab\n- run: make test\n"),
    ],
)
def test_ordinary_developer_text_is_not_altered(bpe_tok, history: list[str], text: str) -> None:
    guard = EgressGuard.for_profile(history, bpe_tok).for_prompt("Write the body.")
    assert guard.inspect("", text) == []
    assert held(guard, bpe_tok, text) == ""


@pytest.mark.parametrize(
    ("history", "secret"), [([f"Alerts go to {WEBHOOK}"], WEBHOOK), ([f"export GITHUB_TOKEN={GH_TOKEN}"], GH_TOKEN)]
)
def test_the_registered_secret_itself_is_still_held(bpe_tok, history: list[str], secret: str) -> None:
    guard = EgressGuard.for_profile(history, bpe_tok).for_prompt("Write the body.")
    text = f"Post it to {secret} now."
    assert leaked(guard, bpe_tok, text, secret) == ""
    # and its secret part alone
    tail = secret[-20:]
    assert leaked(guard, bpe_tok, f"The end is {tail} ok.", tail) == ""
