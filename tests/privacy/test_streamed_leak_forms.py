"""Four forms that used to reach the cloud a few tokens at a time (issue 30): an address spelled
out with wide gaps, a history secret split in two, a URL's password with reserved characters, and
a keyword's punctuation-heavy value. Each is drafted K characters a round through `plan_uplink`
with a cloud that accepts every draft; no character of the span may go up."""

from __future__ import annotations

import pytest

from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.history_secrets import HistorySecretDetector, history_secrets
from specsteer.privacy.normalize import fold
from specsteer.privacy.pii import PiiDetector
from specsteer.privacy.recognizers import SecretRecognizer
from specsteer.privacy.spans import EMAIL, SECRET, URL_CREDENTIALS
from tests.privacy.test_guard_attack_forms import drafted

HISTORY = ["Deploy notes.\n\n  SMTP_USER=relay\n  SMTP_PASSWORD=Zr4#kP9!mWq2\n"]


def leaked(guard: EgressGuard, tok, text: str, spans: list[tuple[int, int]], draft_len: int = 4) -> str:
    """The characters of `spans` that went up in the clear, drafting `text` K tokens a round."""
    sent, offsets = drafted(guard, tok, text, draft_len)
    out = []
    for i, (a, b) in enumerate(offsets):
        if i in sent and any(a < e and b > s for s, e in spans):
            out.append(text[a:b])
    return "".join(out)


@pytest.fixture(scope="module")
def guard(char_tok) -> EgressGuard:
    return EgressGuard.for_profile(HISTORY, char_tok).for_prompt("Write the commit body.")


def span_of(text: str, *parts: str) -> list[tuple[int, int]]:
    return [(text.index(p), text.index(p) + len(p)) for p in parts]


@pytest.mark.parametrize(
    "address",
    [
        "  ".join("quinn.adler@mail.example.net"),  # two spaces between characters
        "   ".join("quinn.adler@mail.example.net"),  # three
        "    ".join("quinn.adler@mail.example.net"),  # four
    ],
)
@pytest.mark.parametrize("draft_len", [1, 4])
def test_a_spaced_out_address_never_goes_up(guard, char_tok, address: str, draft_len: int) -> None:
    text = f"Please mail {address} before noon."
    assert leaked(guard, char_tok, text, span_of(text, address), draft_len) == ""


def test_a_spaced_out_run_keeps_its_trailing_gap_while_it_is_written() -> None:
    # The gap after the last letter so far may be a gap between letters: the word stays open.
    assert fold("mail q  u  i  n  n  .  ").text == "mail quinn."
    assert fold("mail q\t\tu\t\ti\t\tn\t\tn").text == "mail quinn"
    assert PiiDetector([EMAIL]).hazard("mail q  u  i  n  n  .  ") is not None


def test_a_history_secret_split_in_two_is_withheld_in_both_parts(guard, char_tok) -> None:
    text = "Paste Zr4; then, after a pause, #kP9!mWq2 into the form."
    assert leaked(guard, char_tok, text, span_of(text, "Zr4", "#kP9!mWq2")) == ""
    d = HistorySecretDetector(["Zr4#kP9!mWq2"])
    assert [text[s.start : s.end] for s in d.find(text)] == ["Zr4", "#kP9!mWq2"]


def test_a_split_needs_the_rest_of_the_secret_and_a_word_is_no_first_part() -> None:
    d = HistorySecretDetector(["Granite-Plum-Comet86"])
    # The first part alone, or followed by something else, is no span.
    assert d.find("Granite is a rock; plum is a fruit.") == []
    # "ran" occurs inside the passphrase, but as a word it starts nothing: no hold.
    assert d.hazard("the job ran fine") is None
    assert d.hazard("the Granite tile") is not None  # the passphrase's start: the rest may follow
    text = "Granite, and after that -Plum-Comet86"
    assert [text[s.start : s.end] for s in d.find(text)] == ["Granite", "-Plum-Comet86"]


@pytest.mark.parametrize(
    "password", ["Tr0ub4dor&3#x", "q?W9/e@R5!t", "@lpha7Beta#9"]
)  # "#", "?", "/" and "@" are not percent-encoded as pasted
def test_a_urls_password_is_held_whatever_its_characters(guard, char_tok, password: str) -> None:
    text = f"The worker logged amqp://svc:{password}@mq.internal:5672/vhost on start."
    assert leaked(guard, char_tok, text, span_of(text, password)) == ""
    found = PiiDetector([URL_CREDENTIALS]).find(text)
    assert [text[s.start : s.end] for s in found] == [f"amqp://svc:{password}@mq.internal:5672"]


@pytest.mark.parametrize(
    "text",
    [
        "see https://registry.npmjs.org:443/@types/node for the types",
        "open http://localhost:8000?next=ann@example.com in a browser",
        "https://www.npmjs.com/package/@scope/pkg and ssh://git@git.example.org/repo.git",
    ],
)
def test_a_port_or_a_path_with_an_at_sign_is_no_credential(text: str) -> None:
    assert PiiDetector([URL_CREDENTIALS]).find(text) == []


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ('SMTP_PASSWORD="h$4Lq!e^Zp0w"', "h$4Lq!e^Zp0w"),
        ("export SERVICE_TOKEN=%7yX!k*Pq=2", "%7yX!k*Pq=2"),
        ("--password ;Lw2^v&Qz9", ";Lw2^v&Qz9"),
        ("auth_key: zz.9!Ww?Jq", "zz.9!Ww?Jq"),
    ],
)
def test_a_keyword_value_is_held_from_its_first_character(guard, char_tok, line: str, value: str) -> None:
    text = f"The snippet was {line} and it is rotated."
    assert leaked(guard, char_tok, text, span_of(text, value)) == ""
    assert [(text[s.start : s.end], s.kind) for s in SecretRecognizer().find(text)] == [(value, SECRET)]


def test_a_keyword_followed_by_a_word_is_not_a_secret() -> None:
    for text in ("password: required. Then", "the token: see below", "GITHUB_TOKEN is read"):
        assert SecretRecognizer().find(text) == [], text


AWS_HISTORY = ["Use the key AKIAZ7Q2LMXW4R9TB3KD for the staging bucket."]


def test_a_key_of_one_case_and_digits_in_the_history_is_registered() -> None:
    """An AWS access key (AKIA + 16 upper-case letters and digits) was skipped as a constant's name,
    so every form of it the vendor pattern misses went up: lower case, in groups, its last 12."""
    assert history_secrets(AWS_HISTORY) == {"AKIAZ7Q2LMXW4R9TB3KD"}
    # Names of things are still not secrets: constants, snake_case, camelCase.
    names = "set MAX_RETRY_COUNT2 then SHA256_DIGEST and user_id_2 with retryCountLimit"
    assert not history_secrets([f"password: {n}" for n in names.split()])
    # A hash after a word that only holds a keyword ("Monkey", "authored") is no introduced secret.
    sha = "3f9a2b1c4d5e6f708192a3b4c5d6e7f8091a2b3c"
    assert not history_secrets([f"Monkey patch from {sha}", f"authored in {sha}"])
    assert history_secrets([f"the auth token {sha}"]) == {sha}


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("key akiaz7q2lmxw4r9tb3kd done", "akiaz7q2lmxw4r9tb3kd"),
        ("key AKIA Z7Q2 LMXW 4R9T B3KD done", "Z7Q2 LMXW 4R9T B3KD"),
        ("key AKIA-Z7Q2-LMXW-4R9T-B3KD done", "Z7Q2-LMXW-4R9T-B3KD"),
        ("key AKIA_Z7Q2_LMXW_4R9T_B3KD done", "Z7Q2 LMXW 4R9T B3KD"),
        ("key AKIA, Z7Q2, LMXW, 4R9T, B3KD done", "Z7Q2 LMXW 4R9T B3KD"),
        ("the key ends in LMXW4R9TB3KD done", "LMXW4R9TB3KD"),
    ],
    ids=["lower-case", "groups", "hyphenated-groups", "underscored-groups", "comma-groups", "last-12"],
)
def test_a_history_key_is_held_in_its_written_forms(char_tok, text: str, secret: str) -> None:
    guard = EgressGuard.for_profile(AWS_HISTORY, char_tok).for_prompt("Write the commit body.")
    groups = secret.replace("-", " ").split()  # the separators between them say nothing
    assert leaked(guard, char_tok, text, span_of(text, *groups)) == ""


PASSAGE = "Reviewed together with Priya Raghunathan at the Lisbon office after the outage."


@pytest.mark.parametrize(
    "rewrite",
    [str.upper, lambda t: t.replace(" ", "  "), lambda t: t.replace(" ", "\n")],
    ids=["capitals", "spaced", "lines"],
)
def test_a_history_passage_rewritten_in_case_or_spacing_is_held(char_tok, rewrite) -> None:
    """Re-cased or re-spaced, a passage tokenizes to other IDs, and it went up whole."""
    guard = EgressGuard.for_profile([PASSAGE], char_tok).for_prompt("Write the commit body.")
    text = rewrite(PASSAGE)
    words = text.split()
    sent = leaked(guard, char_tok, text, span_of(text, *words[3:8]))
    assert sent == "", sent  # "Priya Raghunathan at the Lisbon": the run's first n tokens may go, no more
