"""Forms an independent attack still got through the guard, and false positives it found on
developer text. Each leak is drafted through `plan_uplink` a few tokens a round with a cloud that
accepts every draft (byte-level BPE, so full-width and Cyrillic text is drafted byte by byte); no
character of it may go up. Each false positive goes up whole."""

from __future__ import annotations

import pytest

from specsteer.privacy.canaries import CanaryDetector
from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.normalize import fold
from specsteer.privacy.recognizers import KeywordValueRecognizer, ShapeRecognizer
from specsteer.privacy.spans import NAME
from specsteer.privacy.uplinked import UplinkRecord
from specsteer.sdk.uplink_guard import plan_uplink

HISTORY = ["Deploy notes.\n\n  SMTP_USER=relay\n  SMTP_PASSWORD=Zr4#kP9!mWq2\n"]
FILLER = " The build was slow today, and we looked at the cache settings for a while before lunch." * 6


def drafted(guard: EgressGuard, tok, text: str, draft_len: int = 4) -> tuple[set[int], list[tuple[int, int]]]:
    """The token indices that went up in the clear drafting `text` K tokens a round, and the
    tokens' character ranges."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = [*enc["input_ids"], tok.eos_token_id]
    sent: set[int] = set()
    p = 0
    while p < len(ids):
        script = iter(ids[p + draft_len :])
        plan = plan_uplink(
            guard,
            tok,
            ids[:p],
            [],
            ids[p : p + draft_len],
            more=lambda s=script: next(s, None),
            eos_ids=frozenset({tok.eos_token_id}),
            draft_len=draft_len,
        )
        sent.update(range(p + plan.kept - len(plan.draft), p + plan.kept))
        p += plan.kept
    return sent, list(enc["offset_mapping"])


def leaked(guard: EgressGuard, tok, text: str, *parts: str) -> str:
    """The characters of `parts` (each at its last occurrence in `text`) that went up."""
    spans = [(text.rindex(p), text.rindex(p) + len(p)) for p in parts]
    sent, offsets = drafted(guard, tok, text)
    return "".join(
        text[a:b] for i, (a, b) in enumerate(offsets) if i in sent and any(a < e and b > s for s, e in spans)
    )


def held(guard: EgressGuard, tok, text: str) -> str:
    """The characters of `text` that did not go up as drafted."""
    sent, offsets = drafted(guard, tok, text)
    return "".join(text[a:b] for i, (a, b) in enumerate(offsets) if i not in sent)


def session(**kw) -> EgressGuard:
    return EgressGuard.for_profile(kw.pop("history", HISTORY), kw.pop("tok"), **kw).for_prompt("Write the body.")


# -- 1-3: keyword values spaced out, spelled out, in full width, in other languages -------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("my pin is 4 7 1 9, ok", "4 7 1 9"),
        ("pin: four seven one nine, ok", "four seven one nine"),
        ("the door code is 47 19 now", "47 19"),
        ("PIN 4-7-1-9 please", "4-7-1-9"),
        ("pin：４７１９ ok", "４７１９"),  # full-width colon and digits
        ("ｐａｓｓｗｏｒｄ： Ｘｑ７！ｍｚｋ ok", "Ｘｑ７！ｍｚｋ"),
        ("Mein Passwort lautet Xq7!mzk, ok", "Xq7!mzk"),
        ("mot de passe : Xq7!mzk ok", "Xq7!mzk"),
        ("la contraseña: Xq7!mzk ok", "Xq7!mzk"),
        ("a senha é Xq7!mzk ok", "Xq7!mzk"),
        ("het wachtwoord is Xq7!mzk ok", "Xq7!mzk"),
        ("PIN-Nummer 4719 ok", "4719"),
        ("meine Geheimzahl ist 4719", "4719"),
        ("パスワード：Xq7!mzk です", "Xq7!mzk"),
        ("パスワードはXq7!mzkです", "Xq7!mzk"),
        ("我的密码是Xq7!mzk。", "Xq7!mzk"),
        ("мой пароль: Xq7!mzk ok", "Xq7!mzk"),
        ("暗証番号は4719です", "4719"),
    ],
)
def test_a_keyword_value_spaced_spelled_wide_or_in_another_language_is_held(bpe_tok, text: str, value: str) -> None:
    assert KeywordValueRecognizer().find(text), text
    assert leaked(EgressGuard.for_profile([], bpe_tok).for_prompt("Write."), bpe_tok, text, value) == ""


@pytest.mark.parametrize(
    "text",
    [
        "pin the version to 1.2 before the release",
        "pin 3 of 4 is loose",
        "the password e-mailed on 2024-01-05 expired",
        "pin one or two packages",
        "run the tests one two three times",
        "Passwort vergessen? Klicken Sie hier.",
    ],
)
def test_keyword_words_without_a_value_go_up(bpe_tok, text: str) -> None:
    assert KeywordValueRecognizer().find(text) == []
    assert held(EgressGuard.for_profile([], bpe_tok).for_prompt("Write."), bpe_tok, text) == ""


# -- 4: a secret sent in chunks far apart, across rounds of one session -------------------------


def test_a_history_secret_in_chunks_far_apart_is_held(bpe_tok) -> None:
    text = "First part: Zr4#" + FILLER + " then kP9! " + FILLER + " and mWq2 done."
    assert leaked(session(tok=bpe_tok), bpe_tok, text, "Zr4#", "kP9!", "mWq2") == ""


def test_a_canary_in_chunks_far_apart_goes_up_one_chunk_at_most(bpe_tok) -> None:
    # Digits alone: the first chunk says little and developer text has such numbers; no later one goes up.
    g = session(tok=bpe_tok, canaries=["my pin is 482913"])
    text = "code 482" + FILLER + " and 913 ok."
    assert leaked(g, bpe_tok, text, "913") == ""


def test_a_password_held_once_is_held_in_chunks_later_in_the_session(bpe_tok) -> None:
    text = "the password is Xq7!mzk9 ok." + FILLER + " again Xq7! and later" + FILLER + " mzk9 done"
    assert leaked(session(tok=bpe_tok, history=[]), bpe_tok, text, "Xq7!", "mzk9") == ""


def test_the_record_of_what_went_up_is_one_sessions() -> None:
    record = UplinkRecord([("zr4#kp9!mwq2", "secret")], common_words=["the", "and"])
    record.note("chunk zr4 ok")  # letters and digits... of three characters: noted, not held
    assert record.find("then kp9 now", 5)  # with what went up it makes a piece
    fresh = UplinkRecord([("zr4#kp9!mwq2", "secret")])
    assert fresh.find("then kp9 now", 5) == []  # alone, three characters say little
    assert record.find("the and now") == []  # words are no chunks


def test_for_prompt_starts_a_new_record(bpe_tok) -> None:
    g = EgressGuard.for_profile(HISTORY, bpe_tok)
    assert g.uplinked is None
    a, b = g.for_prompt("one"), g.for_prompt("two")
    assert a.uplinked is not None and b.uplinked is not None and a.uplinked is not b.uplinked
    a.note_uplink([], bpe_tok.encode("the zr4 part", add_special_tokens=False), bpe_tok)
    assert a.uplinked.covered and not b.uplinked.covered


def test_ordinary_text_with_a_secret_registered_goes_up(bpe_tok) -> None:
    text = "Bump the cache to 4096 entries." + FILLER + " Then rerun the tests and merge."
    assert held(session(tok=bpe_tok), bpe_tok, text) == ""


# -- 5: a registered name in Cyrillic ----------------------------------------------------------


@pytest.mark.parametrize("text", ["Привет, Алиса! Всё готово.", "Спасибо, Алиса Смит.", "Ревью: Марк Блэк."])
def test_a_registered_name_in_cyrillic_is_held(bpe_tok, text: str) -> None:
    g = session(tok=bpe_tok, identities={"Alice Smith": NAME, "Mark Black": NAME})
    names = [w for w in ("Алиса Смит", "Алиса", "Марк Блэк") if w in text][:1]
    assert leaked(g, bpe_tok, text, *names) == ""


def test_other_cyrillic_names_and_words_go_up(bpe_tok) -> None:
    d = CanaryDetector({"Alice Smith": NAME}, common_words=[])
    assert d.find("Привет, Алекс и Алексей! Спасибо, всё работает.") == []
    g = session(tok=bpe_tok, identities={"Alice Smith": NAME})
    assert held(g, bpe_tok, "Привет, Алекс! Спасибо.") == ""


# -- 6: a secret spelled in the spelling alphabet ---------------------------------------------


def test_a_secret_in_the_spelling_alphabet_is_held(bpe_tok) -> None:
    assert fold("key alpha bravo seven x-ray nine quebec done").text == "key ab7x9q done"
    assert fold("echo one two three").text == "echo 1 2 3"  # one spelling word is no spelling
    g = session(tok=bpe_tok, canaries=["the token is ab7x9q2k"])
    text = "it reads alpha bravo seven x-ray nine quebec two kilo, ok"
    assert leaked(g, bpe_tok, text, "bravo seven x-ray nine quebec two kilo") == ""


# -- false positives on developer text ---------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "SEED = 0x5DEECE66D\n",
        "key = 0xFF\n",
        "SEED = 0xDEADBEEFCAFEBABE\n",
        "hash seed 0x9E3779B97F4A7C15 (golden ratio)\n",
        "mac = aa:bb:cc:dd:ee:ff\n",
        "use 01:23:45:67:89:ab in the example\n",
        "dob 1999-12-31 in fixture\n",
        "born 1970-01-01 (epoch) in the fixture\n",
    ],
)
def test_code_constants_and_documentation_examples_go_up(bpe_tok, text: str) -> None:
    assert held(session(tok=bpe_tok), bpe_tok, text) == ""


def test_keys_macs_and_births_that_are_real_are_still_held() -> None:
    k, s = KeywordValueRecognizer(), ShapeRecognizer()
    assert k.find("privkey = 0x4c0883a69102937d6231471b5dbb6204fe512961708279f2e3e8a5d4b8e3a1c2")
    assert k.find("dob 1984-03-12") and k.find("born 31 December 1998")
    assert s.find("mac 3c:22:fb:a1:07:9e")


def test_a_surname_that_is_a_word_alone_goes_up_and_the_name_is_held(bpe_tok) -> None:
    g = session(tok=bpe_tok, identities={"Mark Black": NAME})
    assert held(g, bpe_tok, "Run Black on the file.\n") == ""
    assert leaked(g, bpe_tok, "Reviewed by Mark Black today.", "Mark Black") == ""
