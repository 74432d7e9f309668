"""The guard's detectors on positive and negative examples, and the verdict the device acts on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.privacy.canaries import CanaryDetector, identities_from_trailers
from specsteer.privacy.guard import PLACEHOLDERS, EgressGuard, GuardPolicy, kind_of_placeholder, token_offsets
from specsteer.privacy.ngrams import VerbatimNgramDetector
from specsteer.privacy.pii import PiiDetector, luhn_ok
from specsteer.privacy.spans import CANARY, CARD, EMAIL, IBAN, IP, NAME, PHONE, PRIVATE_NGRAM, URL_CREDENTIALS, Span

PII = PiiDetector()
# Without holding every trailing word as a possible address local part: the other hazards alone.
NO_LOCAL = PiiDetector(hold_local_parts=False)


def kinds(text: str) -> set[str]:
    return {s.kind for s in PII.find(text)}


def matched(text: str) -> list[str]:
    return [text[s.start : s.end] for s in PII.find(text)]


@pytest.mark.parametrize(
    ("text", "kind", "span"),
    [
        ("mail john.doe@example.com now", EMAIL, "john.doe@example.com"),
        ("Signed-off-by: A B <a.b+git@mail.example.org>", EMAIL, "a.b+git@mail.example.org"),
        ("see <20240914090449.612345-1-author@example.com>", EMAIL, "20240914090449.612345-1-author@example.com"),
        ("mail git@github.com about it", EMAIL, "git@github.com"),
        ("+44 20 7946 0958", PHONE, "+44 20 7946 0958"),
        ("call (415) 555-0132.", PHONE, "(415) 555-0132"),
        ("415.555.0132", PHONE, "415.555.0132"),
        ("Tel. 030 1234567", PHONE, "030 1234567"),
        ("+4930123456", PHONE, "+4930123456"),
        ("card 4111 1111 1111 1111 ok", CARD, "4111 1111 1111 1111"),
        ("4111111111111111", CARD, "4111111111111111"),
        ("amex 3782-822463-10005", CARD, "3782-822463-10005"),
        ("host 81.2.69.160 is up", IP, "81.2.69.160"),
        ("from 10.0.12.7.", IP, "10.0.12.7"),
        ("addr 2001:db8::1 x", IP, "2001:db8::1"),
        ("fe80::1%eth0", IP, "fe80::1%eth0"),
        ("git clone https://user:hunter2@example.com/r.git", URL_CREDENTIALS, "https://user:hunter2@example.com"),
        ("https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/x", URL_CREDENTIALS, None),
        ("IBAN GB82 WEST 1234 5698 7654 32.", IBAN, "GB82 WEST 1234 5698 7654 32"),
        ("DE89370400440532013000", IBAN, "DE89370400440532013000"),
    ],
)
def test_personal_data_is_found(text: str, kind: str, span: str | None) -> None:
    found = [s for s in PII.find(text) if s.kind == kind]
    assert found, f"{kind} not found in {text!r}"
    if span is not None:
        assert text[found[0].start : found[0].end] == span


@pytest.mark.parametrize(
    "text",
    [
        # git and code
        "HEAD@{1} and stash@{0} and @{upstream}",
        "#define CAT(a, b) a@b.c",
        "user@localhost",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "gcc@13--13.2.0.ventura.bottle.tar.gz",
        "icon@2x.png",
        "std::vector and a::b and Foo::Bar",
        "0x7fffffff and 0xdeadbeef",
        "t4014-foo.sh line 1234567",
        "@@ -12,7 +12,8 @@",
        # versions, sections, numbers
        "v2.41.0 and Git 2.39.2.1",
        "documentation prior to 1.8.0.3 was ambiguous",
        "According to section 6.3.1.8 of the C99 standard",
        "exceeds maximum object size 9223372036854775807",
        "1234567890123456",  # Luhn fails
        "1700000000 and 1,234,567 and pages 100-200",
        "+0.01)     0.21(0.19 +0.00) -91.9",
        # dates and times
        "2023-01-15",
        "2023-01-15T10:20:30Z",
        "2023-01-15T10:20:30+01:00",
        "Date: Mon Jan 1 10:00:00 2024 +0100",
        "10:20:30 and 12:34:56.789",
        # addresses that are not personal
        "127.0.0.1 and ::1 and 0.0.0.0",
        "https://example.com/a and ssh://git@host/x",
        "IBAN XX00 1234 5678 9012 34",  # fails mod 97
    ],
)
def test_tricky_negatives_are_not_personal_data(text: str) -> None:
    assert PII.find(text) == []


def test_luhn_and_card_prefix() -> None:
    assert luhn_ok("4111111111111111")
    assert not luhn_ok("4111111111111112")
    assert luhn_ok("79927398713")
    # Luhn-valid but no card network issues numbers starting with 9: a counter, not a card.
    assert luhn_ok("9000000000000001")
    assert PII.find("9000000000000001") == []
    # A table of single digits is not a grouped card number even if its digits pass Luhn.
    assert PII.find("4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1") == []


def test_kinds_can_be_restricted_and_unknown_kinds_refused() -> None:
    only_email = PiiDetector([EMAIL])
    assert {s.kind for s in only_email.find("a@example.com 81.2.69.160")} == {EMAIL}
    with pytest.raises(ValueError, match="unknown"):
        PiiDetector(["ssn"])


@pytest.mark.parametrize(
    ("text", "kind", "start_text"),
    [
        ("Signed-off-by: A <john.doe@exam", EMAIL, "john.doe@exam"),
        ("mail me at john.doe@", EMAIL, "john.doe@"),
        ("reach me on +1 41", PHONE, "+1 41"),
        ("card 4111 1111 11", PHONE, "4111 1111 11"),
        ("host 192.168.", EMAIL, "192.168."),  # "192.168.x@host" is an address too
        ("addr 2001:db8:", IP, "2001:db8:"),
        ("clone https://user", URL_CREDENTIALS, "https://user"),
    ],
)
def test_hazards_mark_a_span_that_may_still_complete(text: str, kind: str, start_text: str) -> None:
    h = (PII if kind == EMAIL else NO_LOCAL).hazard(text)
    assert h is not None and h.kind == kind
    assert text[h.start :] == start_text and h.end == len(text)


@pytest.mark.parametrize("text", ["a plain sentence.", "version 2 of it", "t4014", "HEAD@{1}", "https://x.org/a"])
def test_no_hazard_in_text_that_cannot_grow_into_personal_data(text: str) -> None:
    assert NO_LOCAL.hazard(text) is None


def test_identities_from_trailers() -> None:
    found = identities_from_trailers(
        [
            "Signed-off-by: Test User One <user.one@example.invalid>",
            "Reported-by: Jeff <jeff@example.invalid>",
            "Helped-by: Ada Lovelace",
            "Cc: not a trailer line <",
        ]
    )
    assert found == {
        "user.one@example.invalid": EMAIL,
        "Test User One": NAME,
        "jeff@example.invalid": EMAIL,
        "Jeff": NAME,  # one word, no common word: a name too since issue #49 (Build 1)
        "Ada Lovelace": NAME,
    }


def test_registered_strings_match_case_and_whitespace_insensitively() -> None:
    d = CanaryDetector({"Test User One": NAME, "my PIN is 123456": CANARY})
    text = "thanks test  user\none, and My PIN is 123456."
    assert [(text[s.start : s.end], s.kind) for s in d.find(text)] == [
        ("test  user\none", NAME),
        ("My PIN is 123456", CANARY),
    ]
    # Word boundaries: a registered name inside a longer word is not that name.
    exact = CanaryDetector({"Test User One": NAME, "my PIN is 123456": CANARY}, variants=False)
    assert exact.find("Test User Oneida") == []
    assert exact.find("my PIN is 1234567") == []


def test_registered_string_prefix_is_a_hazard_only_from_a_word_start_and_min_length() -> None:
    d = CanaryDetector({"Test User One": NAME}, min_prefix=4)
    h = d.hazard("Signed-off-by: Test User")
    assert h is not None and h.kind == NAME and h.start == len("Signed-off-by: ")
    assert d.hazard("Signed-off-by: Test User ") is not None  # still a prefix, with the space
    assert d.hazard("by: Te") is None  # shorter than min_prefix
    assert d.hazard("Latest User") is None  # "test" inside a word is not a start
    assert d.hazard("Test Users") is None


def test_verbatim_ngrams_on_ids_need_n_tokens_and_respect_the_prompt(char_tok: PreTrainedTokenizerFast) -> None:
    history = ["the frobnicator leaks when the queue is full"]
    # min_words=0: every run of n tokens counts (the passage rule has its own test below).
    d = VerbatimNgramDetector.from_texts(history, char_tok, n=8, min_words=0)
    enc = lambda s: char_tok.encode(s, add_special_tokens=False)  # noqa: E731
    assert d.find_ids(enc("xx frobnica yy")) == [(2, 11)]  # " frobnica" is 9 chars: two 8-grams, one run
    assert d.find_ids(enc("xx frobnic yy")) == [(2, 10)]  # " frobnic": exactly 8
    assert d.find_ids(enc("xx frobni yy")) == []  # 7 characters: below n
    # n-grams that the public prompt contains are not private.
    assert d.for_prompt("about the frobnicator").find_ids(enc("the frobnicator")) == []
    # ... and boilerplate can be excluded up front.
    d2 = VerbatimNgramDetector.from_texts(history, char_tok, n=8, public_texts=["when the queue is full"], min_words=0)
    assert d2.find_ids(enc("when the queue is full")) == []
    assert d2.find_ids(enc("leaks when")) != []


def test_verbatim_runs_of_public_forms_do_not_fire_and_private_passages_still_do(
    smol_tok: PreTrainedTokenizerFast,
) -> None:
    """A date, a commit id or one identifier that the history shares with ordinary text is not a
    copied passage, though SmolLM2 spells it in 8+ tokens (one token per digit)."""
    history = [
        "Since 0123abcd45 (t/check-non-portable-shell: detect bashisms, 2018-07-13) the lint runs early.",
        "The staging box with the payroll export lives under my desk in room four, next to the printer.",
        "Door code 4417 0815 2342 1234 9876, backup 5555 0000 1111.",
    ]
    d = VerbatimNgramDetector.from_texts(history, smol_tok, n=8)
    enc = lambda s: smol_tok.encode(s, add_special_tokens=False)  # noqa: E731
    # Ordinary text quoting other commits repeats the history's public forms: no span.
    for ordinary in (
        "Before 16ed6c97cc (diff-parseopt: convert --inter-hunk-context, 2018-07-24), the option was parsed twice.",
        "All callers are checked by the t/check-non-portable-shell script since 2019.",
    ):
        assert d.find(ordinary) == [], ordinary
        assert d.find_ids(enc(ordinary)) == [], ordinary
    # The strict reading (every run of n tokens) still sees them: what the passage rule removes.
    strict = VerbatimNgramDetector.from_texts(history, smol_tok, n=8, min_words=0)
    assert strict.find_ids(enc("Before abc (x, 2018-07-24), y")) != []
    # A copied private passage still fires, on IDs and on text...
    leak = "As agreed, the staging box with the payroll export lives under my desk."
    spans = d.find(leak)
    assert [s.kind for s in spans] == [PRIVATE_NGRAM]
    assert "payroll export lives under my desk" in leak[spans[0].start : spans[0].end]
    assert d.find_ids(enc(leak)) != []
    # ... and so does a long copy of anything: 2n tokens of digits are not a date's fragment.
    assert d.find("code 4417 0815 2342 1234 9876 ok") != []
    from specsteer.privacy.ngrams import run_words

    assert run_words(", 2018-0") == 0 and run_words("/check-non-portable-shell") == 1
    assert run_words("lives under my desk") == 4 and run_words("給与の書類") == 5


def test_verbatim_ngrams_on_text_map_back_to_characters(bpe_tok: PreTrainedTokenizerFast) -> None:
    secret = "My favourite programming language is Python because it is readable."
    d = VerbatimNgramDetector.from_texts([secret], bpe_tok, n=4)
    text = "Note: " + secret[3:40] + " and so on"
    spans = d.find(text)
    assert len(spans) == 1 and spans[0].kind == PRIVATE_NGRAM
    assert secret[3:40].strip() in text[spans[0].start : spans[0].end + 1]
    assert d.find("The quick brown fox jumps over the lazy dog.") == []


def test_index_of_a_large_history_is_fast_and_deduplicated(char_tok: PreTrainedTokenizerFast) -> None:
    rng = np.random.default_rng(0)
    alphabet = list("abcdefghijklmnopqrstuvwxyz ")
    history = ["".join(rng.choice(alphabet, 400)) for _ in range(300)]
    d = VerbatimNgramDetector.from_texts(history + history, char_tok, n=8)
    assert 0 < len(d) <= 300 * (400 - 7)
    probe = history[123][50:70]
    assert d.find_ids(char_tok.encode(probe, add_special_tokens=False)) == [(0, 20)]


def test_placeholders_are_one_per_kind_and_fit_the_audit_schema() -> None:
    from specsteer.audit.records import is_placeholder

    labels = list(PLACEHOLDERS.values())
    assert len(set(labels)) == len(labels)
    assert all(is_placeholder(label) for label in labels)
    assert kind_of_placeholder("<EMAIL>") == EMAIL and kind_of_placeholder("<nope>") is None


# -- the guard -------------------------------------------------------------------------------------


def guard_for(tok: PreTrainedTokenizerFast, policy: GuardPolicy = GuardPolicy.PLACEHOLDER) -> EgressGuard:
    return EgressGuard.for_profile(
        ["our release checklist lives in the wiki page"],
        tok,
        identities={"Test User One": NAME, "user.one@example.invalid": EMAIL},
        canaries=["my PIN is 123456"],
        policy=policy,
        n=8,
    )


def test_inspect_finds_spans_that_cross_the_committed_draft_boundary(char_tok: PreTrainedTokenizerFast) -> None:
    g = guard_for(char_tok)
    committed, draft = "write to bob.smith@exa", "mple.org today"
    spans = g.inspect(committed, draft)
    assert [(committed + draft)[s.start : s.end] for s in spans] == ["bob.smith@example.org"]
    # Spans wholly inside the committed text are already decided and not reported again.
    assert g.inspect("write to bob.smith@example.org", " today") == []


def test_inspect_merges_overlapping_spans_under_the_most_specific_kind(char_tok: PreTrainedTokenizerFast) -> None:
    g = guard_for(char_tok)
    spans = g.inspect("", "see https://user:pw@example.com/x")
    assert [s.kind for s in spans] == [URL_CREDENTIALS]


def ids(tok: PreTrainedTokenizerFast, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def test_check_passes_clean_drafts(char_tok: PreTrainedTokenizerFast) -> None:
    g = guard_for(char_tok)
    v = g.check(ids(char_tok, "The fix "), ids(char_tok, "is small (ok)."), char_tok)
    assert v.cut_at is None and v.action == "pass" and not v.hold


def test_check_cuts_before_a_span_in_the_middle_of_the_draft(char_tok: PreTrainedTokenizerFast) -> None:
    g = guard_for(char_tok)
    new = ids(char_tok, "ping 81.2.69.160 ok")
    v = g.check(ids(char_tok, "then "), new, char_tok)
    assert v.cut_at == len("ping ") and v.kind == IP and v.action == "cut"
    assert v.span_end == len("ping 81.2.69.160") and v.placeholder == "<IP>"


@pytest.mark.parametrize(
    ("policy", "action"), [(GuardPolicy.PLACEHOLDER, "placeholder"), (GuardPolicy.KEEP_LOCAL, "keep-local")]
)
def test_check_applies_the_policy_when_the_span_is_at_the_front(
    char_tok: PreTrainedTokenizerFast, policy: GuardPolicy, action: str
) -> None:
    g = guard_for(char_tok, policy)
    committed = ids(char_tok, "Signed-off-by: Test User One <user.one@exa")
    new = ids(char_tok, "mple.invalid> thanks")
    v = g.check(committed, new, char_tok)
    assert v.cut_at == 0 and v.kind == EMAIL and v.action == action and not v.hold
    assert v.span_end == len("mple.invalid")
    assert g.placeholder_ids(EMAIL, char_tok) == ids(char_tok, "<EMAIL>")


def test_check_holds_at_a_hazard_and_ignores_it_past_the_send_boundary(char_tok: PreTrainedTokenizerFast) -> None:
    g = guard_for(char_tok)
    new = ids(char_tok, "mail joe@exam")
    v = g.check(ids(char_tok, "so "), new, char_tok)
    assert v.hold and v.action == "hold" and v.cut_at == len("mail ") and v.kind == EMAIL
    # Look-ahead beyond `send` resolves it: the draft up to "mail " is clean either way.
    longer = ids(char_tok, "mail joe@example.com now")
    v2 = g.check(ids(char_tok, "so "), longer, char_tok, send=len("mail "))
    assert v2.cut_at is None
    v3 = g.check(ids(char_tok, "so "), longer, char_tok, send=len("mail joe"))
    assert v3.cut_at == len("mail ") and not v3.hold and v3.span_end == len("mail joe@example.com")


def test_a_complete_span_at_the_end_holds_because_it_may_grow(char_tok: PreTrainedTokenizerFast) -> None:
    g = guard_for(char_tok)
    v = g.check([], ids(char_tok, "joe@example.co"), char_tok)
    assert v.cut_at == 0 and v.hold and v.kind == EMAIL


def test_check_catches_private_ngrams_as_drafted_ids(char_tok: PreTrainedTokenizerFast) -> None:
    g = guard_for(char_tok).for_prompt("Write the release notes")
    committed = ids(char_tok, "See: our release")
    v = g.check(committed, ids(char_tok, " checklist xx"), char_tok)
    assert v.cut_at == 0 and v.kind == PRIVATE_NGRAM and v.placeholder == "<PRIVATE>"


def test_check_validates_send(char_tok: PreTrainedTokenizerFast) -> None:
    with pytest.raises(ValueError, match="send"):
        guard_for(char_tok).check([], [5, 6], char_tok, send=3)


def test_token_offsets_survive_split_multibyte_characters(bpe_tok: PreTrainedTokenizerFast) -> None:
    text = "caf\u00e9 \u2603 ok"
    all_ids = ids(bpe_tok, text)
    full, offs = token_offsets(bpe_tok, [], all_ids)
    assert full == text
    assert offs[0] == 0 and offs[-1] == len(text)
    assert offs == sorted(offs)


def test_no_byte_of_a_spans_first_character_goes_up_ahead_of_the_cut() -> None:
    # Prepare: a byte-level BPE whose token "Ġï¼" is a space plus the first two bytes of a
    # full-width letter (as Qwen's tokenizer splits " Ｍａｒｉｓｏｌ"); the name is registered.
    from tests.tinymodels import SAMPLE_TEXTS, bpe_tokenizer

    tok = bpe_tokenizer([*SAMPLE_TEXTS, " ".join(chr(0xFF21 + i) for i in range(26))], vocab_size=400)
    guard = EgressGuard.for_profile([], tok, identities={"Marisol Brightwater": NAME})
    committed = ids(tok, "This reproduces the setup that")
    new = ids(tok, " Ｍａｒｉｓｏｌ Ｂｒｉｇｈｔｗａｔｅｒ described it.")
    assert tok.decode(new[:1]) == " \ufffd"  # the first token ends inside "Ｍ"
    # Execute
    verdict = guard.check(committed, new, tok)
    # Assert: the cut comes before that token: none of "Ｍ"'s bytes reach the cloud.
    assert verdict.cut_at == 0 and verdict.kind == NAME


def test_guard_on_a_real_tokenizer_redacts_an_identity_across_tokens(smol_tok: PreTrainedTokenizerFast) -> None:
    g = guard_for(smol_tok)
    text = "Thanks.\n\nSigned-off-by: Test User One <user.one@example.invalid>\n"
    all_ids = ids(smol_tok, text)
    cut = len(ids(smol_tok, "Thanks.\n\nSigned-off-by:"))
    v = g.check(all_ids[:cut], all_ids[cut:], smol_tok)
    assert v.cut_at == 0 and v.kind == NAME and not v.hold
    sent = smol_tok.decode(all_ids[: cut + v.cut_at])
    assert "Test User One" not in sent


def test_span_rejects_inverted_ranges() -> None:
    with pytest.raises(ValueError):
        Span(3, 2, EMAIL)


@pytest.mark.parametrize("tok_name", ["char_tok", "bpe_tok", "smol_tok"])
def test_guard_decodes_exactly_like_the_device(tok_name: str, request: pytest.FixtureRequest) -> None:
    """The guard must judge the text the device shows the user (`Specialist.decode`)."""
    from specsteer.privacy.spans import decode as _decode

    tok = request.getfixturevalue(tok_name)
    rng = np.random.default_rng(1)
    for _ in range(50):
        sample = rng.integers(0, len(tok), int(rng.integers(1, 30))).tolist()
        expected = tok.decode(sample, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        assert _decode(tok, sample) == expected


def test_the_guard_writes_nothing_anywhere(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    char_tok: PreTrainedTokenizerFast,
) -> None:
    """Indexing a history and checking drafts leaves no file, cache entry or log line behind."""
    import logging
    import tempfile

    marker = "zq-private-marker-81"
    for var in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "HF_HOME"):
        folder = tmp_path / var
        folder.mkdir()
        monkeypatch.setenv(var, str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    caplog.set_level(logging.DEBUG)
    g = EgressGuard.for_profile([f"history with {marker} inside it"], char_tok, identities={"Ada Lovelace": NAME})
    v = g.for_prompt("a prompt").check(ids(char_tok, "so "), ids(char_tok, f"x {marker} y"), char_tok)
    assert v.cut_at is not None
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    out, err = capfd.readouterr()
    assert marker not in out + err + caplog.text


def test_final_text_drops_hazards_but_keeps_complete_spans(char_tok: PreTrainedTokenizerFast) -> None:
    """At end of sequence a trailing "2019-08-13)" cannot grow into a phone, so nothing holds."""
    g = guard_for(char_tok)
    tail = ids(char_tok, " 2019-08-13")
    assert g.check(ids(char_tok, "released"), tail, char_tok).hold
    assert g.check(ids(char_tok, "released"), tail, char_tok, final=True).cut_at is None
    v = g.check([], ids(char_tok, "joe@example.co"), char_tok, final=True)
    assert v.cut_at == 0 and not v.hold and v.action == "placeholder"


@pytest.mark.parametrize("form", ["JaneDoe", "janedoe", "@janedoe", "doe.jane", "Jane-Doe", "doe_jane"])
def test_a_registered_name_is_found_in_the_handles_developers_write(form: str) -> None:
    """Handles and joined forms went up (`JaneDoe`, `@janedoe`), and "Jane-Doe" went up as the surname."""
    d = CanaryDetector({"Jane Doe": NAME})
    text = f"Thanks {form} for the review."
    spans = d.find(text)
    assert spans and all(s.kind == NAME for s in spans)
    covered = "".join(text[s.start : s.end] for s in spans)
    assert covered.lower().replace("@", "").replace("-", "").replace("_", "").replace(".", "") in ("janedoe", "doejane")
    assert d.find("The deer and the doe ran off.") == []  # the surname alone is a word


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("Will Power", "Improve willpower of the retry loop"),
        ("Max Well", "Use maxwell kernels"),
        ("Mark Down", "Render markdown in the changelog"),
        ("Max Power", "Add a max-power flag"),
    ],
)
def test_a_name_that_joins_into_a_word_is_not_held_as_that_word(name: str, text: str) -> None:
    assert CanaryDetector({name: NAME}).find(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "詳細はjane.doe@example.comまでご連絡くださいよろしくお願いいたします以上です",
        "不具合報告先jane.doe@example.com。",
    ],
)
def test_an_address_in_text_without_spaces_is_the_address_alone(text: str) -> None:
    """Letters of every script joined a Japanese sentence to the address, which then matched no
    top-level domain and went up whole."""
    spans = PiiDetector().find(text)
    assert [(text[s.start : s.end], s.kind) for s in spans] == [("jane.doe@example.com", EMAIL)]
