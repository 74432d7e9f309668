"""Leak forms of attack 12: values a keyword announces ("the wifi password is ...", "pin 4383",
national identifiers by their name, dates of birth, bank accounts), identifiers with a shape of
their own (vendor tokens, TOTP seeds, crypto and MAC addresses, coordinates, defanged IPv4, phone
runs and links, P.O. boxes, streets before their number, dotted IBANs) and wallet seed phrases.

Each form is found by its recognizer and each tricky negative is not; test_announced_streamed.py
drafts them through the whole guard."""

from __future__ import annotations

import random

import pytest

from specsteer.privacy.recognizers import KeywordValueRecognizer, SeedPhraseRecognizer, ShapeRecognizer
from specsteer.privacy.spans import Detector


def found(detector: Detector, text: str) -> list[str]:
    return [text[s.start : s.end] for s in detector.find(text)]


ANNOUNCED = [
    ("the wifi password is Bluebird2018?", "Bluebird2018?"),
    ("my email password was k7!meadow", "k7!meadow"),
    ("router password: Tangerine#44", "Tangerine#44"),
    ("the password is $ecretW0rd! now", "$ecretW0rd!"),
    ("password is xK9!mWq2", "xK9!mWq2"),
    ("my bike lock pin is 1987.", "1987"),
    ("garage pin 4383", "4383"),
    ("the door code is 902716", "902716"),
    ("PIN: 5521", "5521"),
    ("api key is pys7t0r04j9w6xru861wpmbfzd8t422g", "pys7t0r04j9w6xru861wpmbfzd8t422g"),
    (
        "privkey " + "f026d47c97fab8995c7964db1be34446b105012cb837c6697a396072754a637d",
        "f026d47c97fab8995c7964db1be34446b105012cb837c6697a396072754a637d",
    ),
    ("DD_API_KEY 123f326ca81fa3a80811cb0fb57558ee", "123f326ca81fa3a80811cb0fb57558ee"),
    ("CPF 17187727852", "17187727852"),
    ("my aadhaar is 810963830142 for KYC", "810963830142"),
    # In quotes, or after "=>": the quote stopped the value class, and the value went up.
    ('my password is "Tr0ub4dor&3x" now.', "Tr0ub4dor&3x"),
    ("my password is 'Tr0ub4dor&3x' now.", "Tr0ub4dor&3x"),
    ("password => Tr0ub4dor&3x ok.", "Tr0ub4dor&3x"),
    ('api_key: "pys7t0r04j9w6xru861wpmbfzd8t422g"', "pys7t0r04j9w6xru861wpmbfzd8t422g"),
    ("taxpayer id 17187727852 on the invoice", "17187727852"),
    ("PAN: NKSFD6251M", "NKSFD6251M"),
    ("tax id 67355910481", "67355910481"),
    ("my tax file number is 664 866 173", "664 866 173"),
    ("SSN 553858201", "553858201"),
    ("passport no. 01MU33842", "01MU33842"),
    ("my driver's license number is D846-1820-7129", "D846-1820-7129"),
    ("born 25 July 2004", "25 July 2004"),
    ("DOB: 03/14/1987", "03/14/1987"),
    ("date of birth is March 9, 1991", "March 9, 1991"),
    ("geb. 14.03.1987 in Kiel", "14.03.1987"),
    ("née le 2 février 1990", "2 février 1990"),
    ("pay me: sort code 66-04-87, account 64759382", "66-04-87, account 64759382"),
    ("wire to routing 197296688 acct 7577389305", "197296688 acct 7577389305"),
    ("my account number is 00417732915", "00417732915"),
]

NOT_ANNOUNCED = [
    "the password is hunter2",  # the documentation's example
    "the password is abc123",
    "private key is 2048 bits",
    "the password is required.",
    "password: see the vault",
    "the password is stored in the keychain",
    "exit code 1234 means the lock was held",
    "error code 4040 from the API",
    "the api key is read from the environment",
    "the token is refreshed every 3600 seconds",
    "born in London, raised in Leeds",
    "passport expires next year",
    "PIN the dependency to 1.2.3",
    "cache key 3f2a9b1c",
    "the AWS account 123456789012 owns the bucket",
    "SSN 000-00-0000",
    "tax id 12345678901",
    "secret key length must be 32 bytes",
    "password length 12345678 is too long",
    "password = os.environ['DB_PASS']",  # code that reads a password
    "password: ${DB_PASSWORD}",
    "password: <your-password>",
    "call it with our pin 2024 release",
    "we bumped the pin to 1.4.2",
    "account 12345678 test fixture",
]


@pytest.mark.parametrize(("text", "value"), ANNOUNCED)
def test_an_announced_value_is_found(text: str, value: str) -> None:
    assert found(KeywordValueRecognizer(), text) == [value]


@pytest.mark.parametrize("text", NOT_ANNOUNCED)
def test_prose_and_examples_after_a_keyword_are_not_values(text: str) -> None:
    assert found(KeywordValueRecognizer(), text) == []


SHAPED = [
    ("login with 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 then push", "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"),
    ("mailgun api key-5ec0303a69392391735e55e85e0c0339", "key-5ec0303a69392391735e55e85e0c0339"),
    ("shopify admin token 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", "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"),
    ("authenticator secret is HT5W JLKQ QSTO JLBD", "HT5W JLKQ QSTO JLBD"),
    (
        "otpauth://totp/Acme:me?secret=JBSWY3DPEHPK3PXP&issuer=Acme",
        "otpauth://totp/Acme:me?secret=JBSWY3DPEHPK3PXP&issuer=Acme",
    ),
    ("my wallet bc1qpgdjrskkj2xu8dt3x7hczsgxxkj7cscwcvp0xx", "bc1qpgdjrskkj2xu8dt3x7hczsgxxkj7cscwcvp0xx"),
    ("send to 1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa please", "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa"),
    ("eth 0x52908400098527886E0F7030069857D2E4169EE7", "0x52908400098527886E0F7030069857D2E4169EE7"),
    ("my laptop's MAC is 61-7c-08-8a-3b-70", "61-7c-08-8a-3b-70"),
    ("switch port 0011.22ab.cdef", "0011.22ab.cdef"),
    ("my home box is 192 dot 168 dot 39 dot 192", "192 dot 168 dot 39 dot 192"),
    ("ip 10[.]0[.]12[.]57", "10[.]0[.]12[.]57"),
    ("home: -56.36829, -99.23916", "-56.36829, -99.23916"),
    ("at 48.8584\u00b0 N, 2.2945\u00b0 E", "48.8584\u00b0 N, 2.2945\u00b0 E"),
    ("my cell is 8662487647", "8662487647"),
    ("ping me on https://wa.me/338551590042", "wa.me/338551590042"),
    ("tel:44818927626", "tel:44818927626"),
    ("send it to P.O. Box 6622, Kingsbridge, TX 01955", "P.O. Box 6622, Kingsbridge, TX 01955"),
    ("I live at Quayside Street 196, Unit 8B, Fairview", "Quayside Street 196, Unit 8B, Fairview"),
    ("IBAN DE89.3704.0044.0532.0130.00", "DE89.3704.0044.0532.0130.00"),
    ("CPF: 171.877.278-52", "171.877.278-52"),
    ("my aadhaar is 8109 6383 0142 for KYC", "8109 6383 0142"),
    ("holder NKSFD6251M", "NKSFD6251M"),
    ("CF VGCYBS23E03G092E", "VGCYBS23E03G092E"),
    ("Steuer 67 355 910 481", "67 355 910 481"),
]

NOT_SHAPED = [
    "took 1700000000 ms",
    "version 1.25, 3.50 and 2.75",
    "see commit 0123456789abcdef0123456789abcdef01234567",
    "all-zero MAC 00:00:00:00:00:00 means unset",
    "the ratio was 12.5, 13.75 after the fix",
    "order 5551234567 shipped",
    "Bump lodash from 4.17.20 to 4.17.21",
    "timestamps 2024-01-02 10:11:12",
    "the 3 dot 5 release",
]


@pytest.mark.parametrize(("text", "value"), SHAPED)
def test_a_shaped_identifier_is_found(text: str, value: str) -> None:
    assert found(ShapeRecognizer(), text) == [value]


@pytest.mark.parametrize("text", NOT_SHAPED)
def test_developer_text_is_not_a_shaped_identifier(text: str) -> None:
    assert found(ShapeRecognizer(), text) == []


def _phrase(rng: random.Random, n: int) -> list[str]:
    from mnemonic import Mnemonic

    return rng.sample(Mnemonic("english").wordlist, n)


@pytest.mark.parametrize("n", [12, 24])
@pytest.mark.parametrize(
    "layout",
    [
        " ".join,
        ", ".join,
        "-".join,
        "\n".join,
        lambda ws: " ".join(w.upper() for w in ws),
        lambda ws: " ".join(f"{i}. {w}" for i, w in enumerate(ws, 1)),
    ],
)
def test_a_seed_phrase_is_found_whatever_separates_its_words(n: int, layout) -> None:
    phrase = layout(_phrase(random.Random(n), n))
    text = f"Wallet backup: {phrase} (keep it offline)"
    # The span may take in a list word next to the phrase ("keep"): it covers the whole phrase.
    spans = SeedPhraseRecognizer().find(text)
    a = text.index(phrase)
    assert len(spans) == 1 and spans[0].start <= a + 3 and spans[0].end >= a + len(phrase)


def test_prose_of_list_words_is_not_a_seed_phrase() -> None:
    text = "Fix the build, add a test for the cache and move the old code into a new file."
    assert found(SeedPhraseRecognizer(), text) == []


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("home: 11", 6),  # a location keyword's number may start a coordinate
        ("home: 11\u00b003'49", 6),
        ("GPS 26.1214\u00b0", 4),
        ("Recovery words:\n1", 16),  # a list's "1" may open a numbered seed phrase
        ("post to https://hooks.sl", 8),
        ("2FA seed: JBSW Y3DP EH", 10),  # base32 after a TOTP keyword, in groups
        ("authenticator key is JBSWY3DPEHPK3", 21),
    ],
)
def test_a_shaped_identifier_is_held_while_written(text: str, start: int) -> None:
    hazards = [h for d in (ShapeRecognizer(), SeedPhraseRecognizer()) if (h := d.hazard(text)) is not None]
    assert min(h.start for h in hazards) == start


@pytest.mark.timeout(30)
def test_a_long_run_of_dashed_words_is_read_in_linear_time() -> None:
    # An unbounded "[\w-]*" before a key keyword was quadratic: 10 KB of "1-1-..." took 11.5 s a
    # check, 100 KB did not finish in 600 s. Bounded, 40 KB is a fraction of a second here; the
    # timeout only catches the quadratic form coming back.
    text = "1-" * 20_000 + " aa-" * 5_000
    assert KeywordValueRecognizer().find(text) == []


@pytest.mark.timeout(30)
def test_base32_after_a_totp_keyword_that_is_no_seed_is_read_in_linear_time() -> None:
    # The TOTP hazard's value, written as sixteen optional groups of 1-4 base32 characters, let the
    # engine try every split of a long run: this text took 127 s a check (found by the TypeScript
    # port's parity run). The answer stays None (the text ends in a word that is no base32).
    text = "2FA: " + "KBL5AG2G5S7TOL7CUP3D" * 2 + " ok"
    assert ShapeRecognizer().hazard(text) is None
    assert ShapeRecognizer().hazard(text[:-3]) is not None  # the same run at the end is held


def test_an_id_whose_region_the_library_knows_only_as_a_province_does_not_crash_the_guard() -> None:
    # python-stdnum's cn.ric raised KeyError('county') for region 119900 (a province, no county),
    # so this draft crashed the guard. Not a valid resident ID, but the keyword announces it: held.
    text = "resident identity card 119900198001011238"
    assert [(s.start, s.end) for s in KeywordValueRecognizer().find(text)] == [(23, 41)]
