"""The guard against a second round of attacks (attack 12): odd input that crashed it, registered
secrets and names in obfuscated forms, a many-secret history's cost, verbatim copies' openings."""

from __future__ import annotations

import base64
import codecs
import json
import random

import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.privacy.canaries import CanaryDetector
from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.history_secrets import HistorySecretDetector
from specsteer.privacy.ngrams import VerbatimNgramDetector
from specsteer.privacy.normalize import fold
from specsteer.privacy.spans import CANARY, NAME

# -- odd input fails closed with a clear error, or is cleaned ------------------------------------------


def test_lone_surrogates_in_history_prompt_and_canary_do_not_crash(bpe_tok: PreTrainedTokenizerFast) -> None:
    body = json.loads('"token \\ud800 here, and the rest of a long private passage"')
    guard = EgressGuard.for_profile([body], bpe_tok, canaries=["my PIN is 12\ud83456"])
    session = guard.for_prompt("Write the body \udcff")
    ids = bpe_tok.encode("hello there", add_special_tokens=False)
    assert session.check([], ids, bpe_tok, final=True).action == "pass"
    assert VerbatimNgramDetector.from_texts([body], bpe_tok, n=4).find("x \udfff y") == []


def test_token_ids_outside_the_vocabulary_are_refused(bpe_tok: PreTrainedTokenizerFast) -> None:
    guard = EgressGuard.for_profile(["some history"], bpe_tok)
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        guard.check([], [-1, 9], bpe_tok)
    # Past the vocabulary it decoded to "" and passed every detector while the wire carried it.
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        guard.check([], [len(bpe_tok) + 10], bpe_tok)
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        guard.check([len(bpe_tok)], [5], bpe_tok)


def test_token_ids_outside_the_vocabulary_are_refused_on_a_torch_free_device(bpe_tok: PreTrainedTokenizerFast) -> None:
    # The onnxruntime/llama.cpp device's `FastTokenizer` had no len(): only negative IDs were caught.
    from specsteer.core.device_lm import FastTokenizer

    fast = FastTokenizer(bpe_tok.backend_tokenizer, None)
    assert len(fast) == len(bpe_tok)
    guard = EgressGuard.for_profile(["some history"], fast)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"outside the tokenizer's vocabulary of {len(bpe_tok)} IDs"):
        guard.check([], [len(bpe_tok) + 10], fast)  # type: ignore[arg-type]


# -- a history with many secrets ------------------------------------------------------------------------


def _integrity_hashes(n: int) -> list[str]:
    rng = random.Random(1)
    return [f"sha512-{base64.b64encode(bytes(rng.randrange(256) for _ in range(64))).decode()}" for _ in range(n)]


def test_a_secret_among_hundreds_of_history_secrets_is_still_found() -> None:
    """A pasted lock file registers hundreds of secrets; the set lookups that replaced a regex
    alternation of all their pieces must still find each one. Their cost is a benchmark's
    (`python -m bench.guard_secret_cost`), not asserted here."""
    hashes = _integrity_hashes(400)
    d = HistorySecretDetector(hashes)
    secret = hashes[123]
    sample = f"cache key {secret[10:40]} and encoded {base64.b64encode(secret.encode()).decode()[8:40]}"
    assert len(d.find(sample)) == 2


# -- a verbatim copy's opening is held while the match forms ---------------------------------------------

PASSAGE = "Meeting with my lawyer about the divorce settlement on Friday, the house goes to her."


def test_the_opening_of_a_verbatim_copy_is_held_until_it_diverges(bpe_tok: PreTrainedTokenizerFast) -> None:
    d = VerbatimNgramDetector.from_texts([PASSAGE], bpe_tok, n=8)
    ids = bpe_tok.encode(PASSAGE, add_special_tokens=False)
    for m in range(4, 8):  # 4 to 7 tokens of the passage: no n-gram yet, but the start of one
        text = "Notes: " + bpe_tok.decode(ids[:m])
        h = d.hazard(text)
        assert h is not None and h.start in (len("Notes:"), len("Notes: ")), (m, text, h)
        assert d.find(text) == []
    assert d.hazard("Notes: " + bpe_tok.decode(ids[:2])) is None  # fewer than hazard_tokens
    # The copy diverges: released.
    assert d.hazard("Notes: " + bpe_tok.decode(ids[:5]) + " banana bread recipes") is None
    # A passage the public prompt holds is not private, nor is its opening.
    assert d.for_prompt(PASSAGE).hazard("Notes: " + bpe_tok.decode(ids[:6])) is None
    # The guard holds (drafts on locally) rather than sending the opening.
    guard = EgressGuard.for_profile([PASSAGE], bpe_tok).for_prompt("Write the body.")
    committed = bpe_tok.encode("Notes: ", add_special_tokens=False)
    verdict = guard.check(committed, ids[:5], bpe_tok)
    assert verdict.hold and verdict.cut_at == 0


# -- registered secrets obfuscated ----------------------------------------------------------------------


def test_number_words_fold_to_digits_in_runs_only() -> None:
    assert fold("the code is six six zero four").text == "the code is 6 6 0 4"
    assert fold("sechs null acht, cinq zéro, seis cero").text == "6 0 8, 5 0, 6 0"
    assert fold("I have one dog and two cats").text == "i have one dog and two cats"
    f = fold("code: seven three")
    assert f.span(6, len(f.text)) == (6, len("code: seven three"))  # a digit maps back to its word


@pytest.mark.parametrize(
    "text",
    [
        "the code is four eight two nine one three",
        "le code est quatre huit deux neuf un trois",
        "der Code ist vier acht zwei neun eins drei",
        "el código es cuatro ocho dos nueve uno tres",
        "backwards it is 319284",
    ],
)
def test_a_pin_in_number_words_or_reversed_is_found(text: str) -> None:
    d = CanaryDetector(["my PIN is 482913"])
    assert any(s.kind == CANARY for s in d.find(text)), text


def test_a_pin_spelled_out_is_held_while_a_number_word_is_half_written() -> None:
    d = CanaryDetector(["my PIN is 482913"])
    text = "le code est quatre huit deux ne"
    h = d.hazard(text)
    assert h is not None and h.start == text.index("quatre")


def test_a_history_secret_reversed_or_in_rot13_is_found_and_held() -> None:
    secret = "Qu4ntum!9EwL"
    d = HistorySecretDetector([secret])
    for form in (secret[::-1], codecs.encode(secret, "rot13")):
        text = f"pw: {form} ok"
        assert [text[s.start : s.end] for s in d.find(text)] == [form]
        half = f"pw: {form[:8]}"  # past the "!": still the start of the form
        h = d.hazard(half)
        assert h is not None and h.start == 4, (form, h)


def test_a_registered_name_reversed_or_in_rot13_is_found() -> None:
    d = CanaryDetector({"Maelis Vanterpool": NAME})
    for form in ("loopretnaV sileaM", codecs.encode("Maelis Vanterpool", "rot13")):
        assert any(s.kind == NAME for s in d.find(f"signed: {form}")), form


# -- a registered name's surname, possessives and logins -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("Reviewed by Vanterpool yesterday.", "Vanterpool"),
        ("Per Vanterpool's request, the flag is gone.", "Vanterpool's"),
        ("The Vanterpools are away.", "Vanterpools"),
        ("home dir is /home/mvanterpool/", "mvanterpool"),
        ("login as maelis.v on the box", "maelis.v"),
        ("ssh maelisv@buildbox", "maelisv"),
        ("ssh maelis@10.0.0.5", "maelis"),
        ("signed: V a n t e r p o o l", "V a n t e r p o o l"),
    ],
)
def test_a_registered_names_surname_and_logins_are_names(text: str, form: str) -> None:
    d = CanaryDetector({"Maelis Vanterpool": NAME}, common_words=["the", "request"])
    assert [text[s.start : s.end] for s in d.find(text) if s.kind == NAME] == [form]


def test_surnames_and_logins_that_are_words_are_not_names() -> None:
    # "S. Hall" must not hold "shall"; a surname the history writes in lower case is a word.
    d = CanaryDetector({"Sarah Hall": NAME, "Maelis Lane": NAME}, common_words=["hall"])
    for text in ("we shall see", "Hall effect sensor", "the hall", "we took Lane 3", "sarah and mlane"):
        assert [s for s in d.find(text) if s.kind == NAME] == [], text
    # A name written in lower case in prose is a word ("maelis" alone), a login only by "@" or "/".
    assert CanaryDetector({"Maelis Vanterpool": NAME}).find("the vanterpool config") == []
