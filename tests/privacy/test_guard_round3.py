"""Issue #49, what the round-3 benchmark set (`bench/guard_cases_round3.py`) found the guard let go:
secrets a note introduces with words between the keyword and the value, a passphrase reversed or
in ROT13 (it has spaces), a split whose part is one letter, and a registered webhook's host alone."""

from __future__ import annotations

import codecs
import datetime

import pytest

from specsteer.privacy.canaries import CanaryDetector
from specsteer.privacy.context_ids import BirthDateRecognizer, LicencePlateRecognizer
from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.history_secrets import HistorySecretDetector
from specsteer.privacy.spans import NAME, SECRET
from specsteer.privacy.special import SpecialCategoryRecognizer
from specsteer.privacy.uplinked import UplinkRecord
from specsteer.sdk.context import Profile
from specsteer.sdk.uplink_guard import guard_for_profile
from tests.privacy.test_guard_attack_forms import held, leaked

NOTES = [
    "Logistics for the week at the lake house.\n\nThe wifi password there is Kestrel-4471, and the "
    "alarm code: 80531. Router admin password: Vq7#mLp2Zx",
    'The restic repository is encrypted. Backup passphrase (keep the card in the drawer): "maple orbit '
    'lantern cobalt".',
]
WEBHOOK = "https://hooks.slack.com/services/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"


def test_a_secret_introduced_with_words_between_keyword_and_value_is_registered() -> None:
    d = HistorySecretDetector.from_history(NOTES)
    assert {"kestrel-4471", "vq7#mlp2zx", "maple orbit lantern cobalt"} <= set(d.secrets), d.secrets
    assert d.pins == ("80531",)
    # "Wifi at the cabin: password is X": the keyword inside another keyword's words still counts.
    assert (
        "fjordlys-2291" in HistorySecretDetector.from_history(["Wifi at the cabin: password is Fjordlys-2291."]).secrets
    )


@pytest.mark.parametrize("encode", [lambda s: s[::-1], lambda s: codecs.encode(s, "rot13")])
def test_a_passphrase_reversed_or_in_rot13_does_not_go_up(bpe_tok, encode) -> None:
    # Registered before round 3 too: what is new is the hold across the encoded form's spaces.
    guard = EgressGuard.for_profile(["passphrase: maple orbit lantern cobalt"], bpe_tok).for_prompt("Write it.")
    form = encode("maple orbit lantern cobalt")
    assert leaked(guard, bpe_tok, f"Put {form} in the seed file for now.", form) == ""


def test_a_secret_split_where_one_part_is_a_single_letter_is_found(bpe_tok) -> None:
    guard = EgressGuard.for_profile(NOTES, bpe_tok).for_prompt("Write the note.")
    text = "Key begins maple o; the tail, sent separately, is rbit lantern cobalt"
    spans = guard.inspect("", text)
    for part in ("maple o", "rbit lantern cobalt"):
        a = text.index(part)
        letters = [i for i in range(a, a + len(part)) if not text[i].isspace()]
        assert all(any(s.start <= i < s.end for s in spans) for i in letters), (part, spans)


def test_a_registered_webhook_does_not_hold_its_host() -> None:
    # The session's record of what went up: "https://hooks.slack.com/" is every Slack webhook's
    # start, so it is no chunk of this one; the webhook's own path still is.
    record = UplinkRecord([(WEBHOOK, SECRET)])
    assert record.find("Allow https://hooks.slack.com/ in the egress proxy.") == []
    assert record.find("the path is T0123ABCD/B0456EFGH/Xk9p then") != []


# -- names in every script ------------------------------------------------------------------------


def test_names_a_latin_history_quotes_in_another_script_are_registered_at_profile_load() -> None:
    profile = Profile.from_obj(
        {
            "profile": [
                {"subject": "s", "body": "Paired with Алексей Морозов on the flaky retry test."},
                {"subject": "s", "body": "Thanks to 박지훈 for spotting the race in the scheduler."},
                {"subject": "s", "body": "خالد المطيري reported the crash on the ARM builders."},
                {"subject": "s", "body": "As discussed with अंकित वर्मा, the cache stays per-process."},
            ]
        }
    )
    names = {n for n, kind in profile.identities.items() if kind == NAME}
    assert names == {"Алексей Морозов", "박지훈", "خالد المطيري", "अंकित वर्मा"}


def test_a_history_in_another_script_registers_no_prose_as_names() -> None:
    from specsteer.privacy.canaries import names_in_prose

    assert names_in_prose("Исправить ошибку в парсере при пустом вводе") == set()
    assert names_in_prose("修复解析器中的错误") == set()


@pytest.mark.parametrize(
    ("registered", "text", "name"),
    [
        ("Алексей Морозов", "Per Alexei Morozov, the old endpoint stays.", "Alexei Morozov"),
        ("محمد القحطاني", "Ask Mohammed Al-Qahtani first.", "Mohammed Al-Qahtani"),
        ("خالد المطيري", "cc Khaled Almutairi: fixed.", "Khaled Almutairi"),
        ("अंकित वर्मा", "The numbers came from Ankit Verma's laptop.", "Ankit Verma"),
        ("박지훈", "The numbers came from Park Ji-hoon's laptop.", "Park Ji-hoon"),
        ("Øystein Brænne", "Ping Oystein Braenne before merging.", "Oystein Braenne"),
    ],
)
def test_a_name_in_another_script_is_found_as_a_colleague_spells_it(registered: str, text: str, name: str) -> None:
    d = CanaryDetector({registered: NAME})
    spans = d.find(text)
    a = text.index(name)
    assert any(s.start <= a and s.end >= a + len(name) for s in spans), spans
    # and no other pair of capitalized words
    assert d.find("Make Python Great, Apply Black Formatting, Merge Main Branch, Ask Mike Morris.") == []


def test_a_devanagari_name_as_written_does_not_go_up_a_byte(bpe_tok) -> None:
    profile = Profile.from_obj({"profile": [{"subject": "s", "body": "Thanks to स्नेहा कुलकर्णी for the fix."}]})
    guard = guard_for_profile(profile, bpe_tok, "placeholder").for_prompt("Write the note.")
    assert leaked(guard, bpe_tok, "Ping स्नेहा कुलकर्णी before merging.", "स्नेहा कुलकर्णी") == ""


# -- licence plates and dates of birth -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "plate"),
    [
        ("Number plate AB12 CDE, the grey Skoda by the gate.", "AB12 CDE"),
        ("My car (HH-RJ 3537) is in bay 14 today.", "HH-RJ 3537"),
        ("parked the car, reg FL-585-DF, on level 2", "FL-585-DF"),
        ("Whose car is 8ABL447? It is in the loading zone.", "8ABL447"),
        ("Kennzeichen WA 08352", "WA 08352"),
    ],
)
def test_a_licence_plate_after_a_vehicle_word_does_not_go_up(bpe_tok, text: str, plate: str) -> None:
    guard = EgressGuard.for_profile([], bpe_tok).for_prompt("Write the note.")
    assert leaked(guard, bpe_tok, text, plate) == ""
    # Without a vehicle word the same shape is a ticket or a build tag.
    assert LicencePlateRecognizer().find(f"Closes {plate} in the tracker.") == []


@pytest.mark.parametrize(
    ("text", "date"),
    [
        ("Aino Marini (02.06.1979) joins the platform team.", "02.06.1979"),
        ("Jonas Berg, 13 May 1997, Oslo", "13 May 1997"),
        ("Passenger: Emil Haddad 15/8/1992", "15/8/1992"),
        ("Aino Costa – 1988-12-05 – emergency contact on file", "1988-12-05"),
    ],
)
def test_a_date_of_birth_beside_a_name_does_not_go_up(bpe_tok, text: str, date: str) -> None:
    guard = EgressGuard.for_profile([], bpe_tok).for_prompt("Write the note.")
    assert leaked(guard, bpe_tok, text, date) == ""
    # A release date beside a version, or a recent date, is no birth date.
    d = BirthDateRecognizer(today=datetime.date(2026, 1, 1))
    assert d.find("Django 5.0 (2023-12-04) dropped it. Merged by Renovate on 01.02.2024. Lukas Holt, 2024-03-01") == []


# -- special categories ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("Remind her about the 150 mg of quetiapine before the flight.", "150 mg of quetiapine"),
        ("Marco takes 10 mg of insulin glargine a day.", "10 mg of insulin glargine"),
        ("After a psychotic episode, he is back part time.", "psychotic episode"),
        ("Off the record, Lena is a member of the Communist Party.", "Communist Party"),
        ("HR asked us not to mention that she is in the Teamsters union.", "Teamsters"),
        ("My manager is an AfD voter, keep it out of the team page.", "AfD"),
        ("Don't schedule it on Friday: our tech lead is Kurdish.", "Kurdish"),
        ("My partner is an observant Jew.", "Jew"),
        ("He has stage 2 breast cancer, so no late deploys.", "stage 2 breast cancer"),
        ("Cover for Lena, who starts rehab for alcohol dependence on Monday.", "rehab for alcohol dependence"),
        ("Off the record, she is a shop steward for Unite.", "shop steward for Unite"),
    ],
)
def test_special_category_data_does_not_go_up(bpe_tok, text: str, span: str) -> None:
    guard = EgressGuard.for_profile([], bpe_tok).for_prompt("Write the note.")
    assert leaked(guard, bpe_tok, text, span) == ""
    # The same words in code and developer prose stay ordinary.
    d = SpecialCategoryRecognizer()
    assert d.find("Return a Union type; the third-party parser is in the Python module; took 150 ms.") == []


# -- national formats: spelled phones, addresses by their leading words, IDs in parentheses --------


@pytest.mark.parametrize(
    ("text", "span"),
    [
        (
            "My number is nine three six five six, three two four four five.",
            "nine three six five six, three two four four five",
        ),
        (
            "text me at zero nine zero, nine three two eight, six nine eight six",
            "zero nine zero, nine three two eight, six nine eight six",
        ),
        ("We moved to Herengracht 111 in March.", "Herengracht 111"),
        ("Send the invoice to Kastanjestraat 205-2.", "Kastanjestraat 205-2"),
        ("Drop the keys at Oudezijds Voorburgwal 100, second bell.", "Oudezijds Voorburgwal 100"),
        ("Address: C/ de Sants 31, 6º 1ª", "C/ de Sants 31, 6º 1ª"),
        ("Send the invoice to ul. Mokotowska 130 m. 17.", "ul. Mokotowska 130 m. 17"),
        ("We moved to 〒784-9892 東京都渋谷区1-18-11 in March.", "〒784-9892 東京都渋谷区1-18-11"),
        ("She gave her fødselsnummer (25045018116) over the phone.", "25045018116"),
        ("Customer record 57.07.19-920.47 failed the import.", "57.07.19-920.47"),
    ],
)
def test_national_formats_do_not_go_up(bpe_tok, text: str, span: str) -> None:
    guard = EgressGuard.for_profile([], bpe_tok).for_prompt("Write the note.")
    assert leaked(guard, bpe_tok, text, span) == ""
    # Ordinary text with the same words keeps every token.
    ordinary = "Moved to Postgres at 5 pm; see Main Street in the docs and take 2 3 off."
    assert held(guard, bpe_tok, ordinary) == ""
