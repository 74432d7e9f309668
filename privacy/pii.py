"""Personal-data patterns: emails (also written out), phone numbers, payment cards, IPv4/IPv6
addresses, URLs carrying credentials, IBANs and street addresses (`PiiDetector`).

Every pattern matches the folded text (`privacy.normalize.fold(text).text`: NFKC, confusables
folded, lower case; spans map back to the raw text), and validators (Luhn, issuer prefixes, IBAN
lengths and mod 97, address shapes) keep version numbers, dates and hashes out. Each detector
also reports a hazard (see `privacy.guard`): the end of a text that could still grow into a match.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from specsteer.privacy.normalize import fold
from specsteer.privacy.spans import ADDRESS, CARD, EMAIL, IBAN, IP, PHONE, URL_CREDENTIALS, Detector, Span, merge_spans

__all__ = ["PiiDetector", "luhn_ok"]

# File extensions that follow an '@' in build artifacts and retina images ("gcc@13--13.2.0.bottle.tar.gz",
# "icon@2x.png"). None is an IANA top-level domain, so skipping them loses no real address.
_EXTENSIONS = (
    "gz tgz bz2 xz zst lz tar txt log json yaml yml toml cfg ini png jpg jpeg gif svg webp bmp ico patch "
    "diff orig rej lock bak tmp swp exe dll dylib cc cpp cxx hpp hh pyc obj"
)
_NOT_TLDS = frozenset(_EXTENSIONS.split())


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Top-level domains an address written out in words ("jane at example dot com") ends with: the
# generic ones in common use, the reserved ones of RFC 2606/6761, and any two-letter country code.
_WORD_TLDS = _words(
    "com org net edu gov mil int info biz name pro mobi app dev io ai me co tv xyz online site tech email "
    "cloud page blog shop store live world today space website club invalid test example local localhost "
    "internal arpa"
)

# Letters of the alphabets that put spaces between words, beside ASCII: Latin with diacritics,
# Greek, Cyrillic (RFC 6531/IDN addresses, "иван.петров@почта.рф", which the folding leaves as they
# are). Not Chinese, Japanese, Korean or Thai: written without spaces, their text runs into an
# address ("詳細はjane.doe@example.comまで") and would swallow it, or hold every run of it.
_GREEK_CYRILLIC = "\u0370-\u03ff\u0400-\u04ff"
_LETTERS = f"a-z0-9\u00c0-\u024f{_GREEK_CYRILLIC}"
# A character of an address's local part or a label, besides the dot.
_L = rf"[{_LETTERS}_%+-]"
_DOT = r"(?:\s*[\[\(\{<]\s*dot\s*[\]\)\}>]\s*|\s+dot\s+|\.)"
_AT = r"(?P<at>\s*[\[\(\{<]\s*at\s*[\]\)\}>]\s*|\s+at\s+|\s*(?:@|%40|&#0*64;|&commat;)\s*)"
_LABEL = rf"[{_LETTERS}](?:[{_LETTERS}-]{{0,61}}[{_LETTERS}])?"
# An address in any of its written forms: "jane.doe@example.com", "jane dot doe at example dot com",
# "jane.doe [at] example [dot] com", "jane.doe (at) example.com", "jane.doe @ example.com", "%40".
_EMAIL_RE = re.compile(
    rf"(?<![{_LETTERS}._%+-])(?P<local>{_L}{{1,64}}(?:{_DOT}{_L}{{1,64}}){{0,8}})"
    rf"{_AT}(?P<domain>(?:{_LABEL}{_DOT}){{1,6}}(?P<tld>[a-z{_GREEK_CYRILLIC}]{{2,24}}))(?![{_LETTERS}-])"
)
_PLAIN_AT = re.compile(r"\s*@\s*")
_WORD_DOT = re.compile(r"\s+dot\s+|[\[\(\{<]\s*dot")

# Phone numbers: separators between digit groups are one of " . - /" (slashes after an area code,
# "030/1234567"); the area code may sit in parentheses; the country code is "+CC" or "00CC".
_PSEP = r"(?:[ .\-/]|\s?[/-]\s?)"
_PHONE_INTL_RE = re.compile(
    r"(?<![\w+.])(?:\+|\b00)[1-9]\d{0,2}(?:\s?\(0\))?(?:" + _PSEP + r"?\(?\d{1,5}\)?){1,7}(?!\d|[.\-/]\d)"
)
# National numbers with a trunk 0: "030 1234567", "06 12 34 56 78", "06.12.34.56.78", "0171/1234567",
# "020 7946 0958", "03-1234-5678", "(030) 1234567", "0612345678".
_PHONE_NATIONAL_RE = re.compile(
    r"(?<![\w.+\-/])(?:\(0\d{1,5}\)|0\d{1,5})(?:" + _PSEP + r"\d{2,8}){1,5}(?![\w\-/]|\.\d)"
    r"|(?<![\w.+\-/])0[1-9]\d{8,9}(?![\w\-/]|\.\d)"
)
# North American "(415) 555-0132", "415-555-0132", "1-415-555-0132", "415/555-0132"; dates never fit 3-3-4.
_PHONE_NANP_RE = re.compile(r"(?<![\w.+\-/])(?:1[ .\-])?(?:\(\d{3}\)[ ]?|\d{3}[-. /])\d{3}[-. ]\d{4}(?![\w\-/]|\.\d)")
# Spanish-style national mobiles without a trunk: "612 34 56 78".
_PHONE_GROUPED_RE = re.compile(r"(?<![\w.+\-/])[6-9]\d{2}(?: \d{2}){3}(?![\w\-/]|\.\d)")

# Card numbers: 13-19 digits, in groups separated by a space, a hyphen or a line break.
_CARD_RE = re.compile(r"(?<![\w.,-])\d(?:(?:[ \-]|[ ]*\n[ ]*)?\d){12,18}(?![\w-]|[.,]\d)")
_IPV4_RE = re.compile(
    r"(?<![\w.-])((?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))(?![\w-]|\.\d)"
)
# Version strings that happen to have four numeric parts ("Git 1.8.0.3", "version 2.39.2.1").
_VERSION_CONTEXT = re.compile(r"(?:\bgit|\bversion|\brelease|\bv|\bsection|§|\bc\d\d)\s*$")
_IPV6_RE = re.compile(r"(?<![\w:.])(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:%[a-z0-9]+)?(?![\w:])")
# A URL's userinfo (RFC 3986: scheme://userinfo@host). A password as people paste it need not be
# percent-encoded: it may hold "@", "#", "?" or "/", so it runs to the *last* "@" that a host (and
# port) follows. The user part has none of ":/?#@" ("https://host:443/@types/node" is a port and a
# path, not a user and a password), and a password of digits then "/" is a port.
_URL_CREDENTIALS_RE = re.compile(
    r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{1,15}://"
    r"(?:[^\s/?#@:]*:(?!\d{1,5}(?:[/?#]|\Z))\S+?|[a-z0-9_-]{20,})"
    r"@[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::\d{1,5})?(?![^\s/?#.,;:)\]>'\"])"
)
# IBANs in either case, grouped by fours or not: checked against the country's length and mod 97.
_IBAN_RE = re.compile(r"(?<![a-z0-9])[a-z]{2}\d{2}(?:[ \-]?[a-z0-9]{4}){2,7}(?:[ \-]?[a-z0-9]{1,3})?(?![a-z0-9])")
# ISO 13616 IBAN lengths by country (the SWIFT registry).
_IBAN_LENGTHS = {
    **dict.fromkeys(_words("NO"), 15),
    **dict.fromkeys(_words("BE"), 16),
    **dict.fromkeys(_words("DK FI FO GL NL SD"), 18),
    **dict.fromkeys(_words("MK SI"), 19),
    **dict.fromkeys(_words("AT BA EE KZ LT LU XK"), 20),
    **dict.fromkeys(_words("CH CR HR LI LV"), 21),
    **dict.fromkeys(_words("BG BH DE GB GE IE ME RS VA"), 22),
    **dict.fromkeys(_words("AE GI IL IQ OM TL"), 23),
    **dict.fromkeys(_words("AD CZ ES MD PK RO SA SE SK TN VG"), 24),
    **dict.fromkeys(_words("EG PT ST"), 25),
    **dict.fromkeys(_words("IS TR"), 26),
    **dict.fromkeys(_words("FR GR IT MC MR SM"), 27),
    **dict.fromkeys(_words("AL AZ BY CY DO GT HU LB PL SV"), 28),
    **dict.fromkeys(_words("BR PS QA UA"), 29),
    **dict.fromkeys(_words("JO KW MU"), 30),
    **dict.fromkeys(_words("MT SC"), 31),
    **dict.fromkeys(_words("LC"), 32),
    **dict.fromkeys(_words("RU"), 33),
}

# Street addresses: "221b baker street", "1600 pennsylvania avenue nw", "12 rue de la paix",
# "hauptstrasse 5" ("straße" folds to "strasse"), "via roma 10", "calle mayor 5, 28013 madrid".
_STREET_TYPES = (
    r"street|st\.?|avenue|ave\.?|road|rd\.?|boulevard|blvd\.?|lane|ln\.?|drive|dr\.?|court|ct\.?|place|pl\.?"
    r"|terrace|way|square|sq\.?|parkway|pkwy\.?|highway|hwy\.?|crescent|close|circle|cir\.?|trail|row|gardens"
    r"|grove|mews|alley|plaza"
)
_FUNCTION_WORDS = _words(
    "the a an of to in on at for and or but with this that these those is are was were be been it its "
    "by from as into than then so not no all any each every our your their his her my we you they "
    "more less most least same other another new old first last next after before about over under "
    "minutes seconds hours days times lines bytes files commits tests ways steps"
)
_POSTCODE = (
    r"(?:,?\s*(?:\d{4,5}|[a-z]{1,2}\d[a-z\d]?\s?\d[a-z]{2}|[a-z]{2}\s+\d{5}(?:-\d{4})?)"
    r"(?:\s+[a-z][a-z-]{2,})?)?"
)
_ADDRESS_EN = re.compile(
    r"(?<![\w.\-/])(?:(?:flat|apt\.?|apartment|suite|unit)\s*\d{1,4}[a-z]?,?\s+)?\d{1,5}[a-z]?,?\s+(?P<words>(?:[a-z][a-z'.-]*\s+){1,3})"
    rf"(?:{_STREET_TYPES})(?![\w])(?:\s+(?:n|s|e|w|ne|nw|se|sw)\b)?"
    rf"(?:,\s*[a-z][a-z-]{{2,}}(?:\s[a-z][a-z-]{{2,}})?{_POSTCODE[:-1]})?"  # a city only with its postcode
)
_ADDRESS_FR = re.compile(
    r"(?<![\w.\-/])\d{1,4}(?:\s?(?:bis|ter))?,?\s+(?:rue|avenue|boulevard|bd|place|chemin|allee|impasse|quai|cours)"
    r"\s+(?:(?:de|du|des|la|le|l'|d')\s*){0,2}[a-z][a-z'-]{2,}(?:-[a-z][a-z'-]+)*"
    r"(?:,?\s*\d{5}(?:\s+[a-z][a-z-]{2,})?)?"
)
# Street names that end in their type, German, Dutch and Nordic ("Hauptstrasse 5", "Herengracht
# 111", "Kastanjestraat 193-2" with its floor, "Oudezijds Voorburgwal 100", "Storgatan 4").
_SUFFIX_STREETS = (
    r"strasse|str\.|weg|platz|allee|gasse|straat|gracht|laan|plein|kade|singel|dijk|burgwal|steeg|markt"
    r"|gatan|gata|vagen|vej|gade|katu|tie"
)
_ADDRESS_DE = re.compile(
    r"(?<![\w.\-/])(?:[a-z][a-z-]{2,}\s(?=[a-z-]*(?:str(?:asse|\.)|burgwal|gracht)))?[a-z-]*(?:"
    + _SUFFIX_STREETS
    + r")\s+\d{1,4}[a-z]?(?:-\d{1,3}|-?[a-z](?![a-z]))?"
    r"(?![\w]|\.\d)"
    r"(?:,?\s*\d{4,5}(?:\s+[a-z][a-z-]{2,})?)?"
)
# A street type before the name: Italian, Spanish ("C/" for calle, with the floor and door after
# it: "C/ de Sants 31, 6º 1ª"), Portuguese, Polish ("ul. Długa 14 m. 3": the flat after "m.").
_PREFIX_STREETS = (
    r"via|viale|piazza|corso|calle|c/|avda\.?|avenida|plaza|paseo|rua|praca|ul\.|ulica|al\.|aleja|os\.|pl\."
)
_ADDRESS_IBERIAN = re.compile(
    r"(?<![\w.\-/])(?:" + _PREFIX_STREETS + r")\s*(?:(?:de|del|la|di|da|do|dei|delle)\s+){0,2}"
    r"[a-z][a-z'-]{2,}(?:\s+[a-z][a-z'-]{2,})?,?\s+\d{1,4}(?![\w.])"
    r"(?:,?\s*\d{1,2}\s?[oa°]\.?(?:\s*\d{1,2}\s?[oa°]\.?)?(?![\w]))?(?:\s+m\.\s*\d{1,4})?"
    r"(?:,?\s*\d{5}(?:\s+[a-z][a-z-]{2,})?)?"
)
# A Japanese address after its postal mark: "〒150-0002 東京都渋谷区渋谷2-21-1".
_ADDRESS_JP = re.compile(r"〒\s?\d{3}-?\d{4}(?:\s?[\u3005\u3040-\u30ff\u4e00-\u9fff\d\-]+)?")

# Hazards: the end of the text could still grow into one of the patterns above. An address's
# local part is held before its "@" arrives ("jane.doe" of "jane.doe@example.com"), as are the
# spelled-out forms ("jane dot doe at exa"): any run that a few more characters could turn into
# an address stays on the device until it dissolves or completes.
_HAZARD_TAIL = 128
_DOTP = r"(?:\s*[\[\(\{<]\s*(?:d(?:o(?:t\s*[\]\)\}>]?\s*)?)?)?|\s+(?:d(?:o(?:t\s*)?)?)?|\.)"  # a dot, as far as written
_ATP = r"(?:\s*[\[\(\{<]\s*(?:a(?:t\s*)?)?|\s+(?:a(?:t\s*)?)?|\s*@?|\s*%4?|\s*&(?:#\d*|c[a-z]*)?)"
_AT_FULL = _AT.replace("?P<at>", "?:")
_EMAIL_HAZARD = re.compile(
    rf"(?<![{_LETTERS}._%+-]){_L}+(?:{_DOT}{_L}+)*"
    rf"(?:{_DOTP}|{_ATP}|{_AT_FULL}(?:[{_LETTERS}-]+(?:{_DOT}[{_LETTERS}-]+)*{_DOTP}?)?)?\Z"
    r"|<[a-z0-9._%+-]*\Z"
)
_BARE_WORD = re.compile(rf"{_L}+\.?")
# Hashes, digests and UUIDs (and their first characters once they are longer than any name):
# held as a local part they never resolve within the look-ahead and would fail closed.
_HASH_LIKE = re.compile(r"(?=[0-9a-f-]*\d)(?:[0-9a-f]{12,}|[0-9a-f]{8}-[0-9a-f-]*)\.?")


def _hex_text(word: str) -> bool:
    """Hex that decodes to printable text may still carry an address or a registered string (hex of
    "user jane@..."): it stays held. A hash's bytes are not text after a few of them."""
    digits = word.rstrip(".")
    digits = digits[: len(digits) // 2 * 2]
    try:
        data = bytes.fromhex(digits)
    except ValueError:
        return False
    return all(0x20 <= b < 0x7F for b in data)


# (Gaps as wide as `privacy.normalize` joins: up to eight spaces or tabs.)
_SPACED_HAZARD = re.compile(r"(?<!\S)(?:[a-z0-9@._+-] {1,8}){1,}[a-z0-9@._+-]? {0,8}\Z")
_DIGITS_HAZARD = re.compile(r"(?<![\w.,])(?:\+|\()?\d[\d .()/\n-]{0,24}\Z")
_IPV6_HAZARD = re.compile(r"(?<![\w:.])[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){1,7}\Z")
# A URL is held while its authority is being written, and from a "user:" on until it ends (a
# password may hold "@", "#", "?" or "/", see `_URL_CREDENTIALS_RE`), unless the ":" began a port.
_URL_HAZARD = re.compile(
    r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{1,15}://"
    r"(?:[^\s/?#@:]*|[^\s/?#@:]*:(?!\d{1,5}[/?#])\S*)\Z"
)
_IBAN_HAZARD = re.compile(r"(?<![a-z0-9])[a-z]{2}\d{1,2}(?:[ \-]?[a-z0-9]{0,4}){0,8}\Z")
_ADDRESS_GROWS = re.compile(r"(?:,?\s*[a-z0-9-]{0,20}){0,4},?\s?")  # ", springfield, il 6270"
_ADDRESS_HAZARD = re.compile(
    r"(?<![\w.\-/])\d{1,5}[a-z]?,?\s+(?:[a-z][a-z'.-]*\s*){0,4}\Z"
    r"|(?<![\w.\-/])(?:" + _PREFIX_STREETS + r"|flat|apt\.?|apartment|suite|unit)"
    r"(?:\s*[a-z0-9][a-z0-9'-]*,?){0,3}\s*\Z"
    r"|(?<![\w.\-/])(?:[a-z][a-z-]{2,}\s)?[a-z-]*(?:" + _SUFFIX_STREETS + r")\s*\d{0,4}(?:-\d{0,3})?\Z"
    r"|〒[\s\d\-]*\Z"
    # A letter that may begin one of the prefixed street types ("C" of "C/ de", "u" of "ul.").
    r"|(?<![\w.\-/])(?:c|c/|ul|al|os|avda)\Z"
)
# Where an address is announced ("moved to", "send ... to", "drop ... at", "address:"), a
# capitalized word may be a street whose type comes at its end ("Herengracht", "Kastanjestraat"):
# held until it is written whole, on the raw text (the capital tells a name).
_ADDRESS_CUE_HAZARD = re.compile(
    r"(?i:\b(?:moved|move|moving|live|lives|living|send|ship|deliver|post|mail|drop|bring|address|at|to))"
    r"(?:\b[^.\n]{0,24}?\b(?:to|at))?[:\s]+(?:[A-Z][\w'-]*\s+)?[A-Z][\w'-]*\Z"
)

# Issuer prefixes of the major card networks; a Luhn-valid number outside them is a counter or ID.
_CARD_PREFIX = re.compile(r"4|5[1-5]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720|3[47]|3(?:0[0-5]|[68])|35|6011|64[4-9]|65|62")


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum of a string of decimal digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _iban_ok(compact: str) -> bool:
    from stdnum import iban

    compact = compact.upper()
    # stdnum checks the BBAN format and mod 97 (not national check digits: a mistyped IBAN is
    # personal all the same); the length table keeps the countries
    # whose IBANs we know to be in use.
    return _IBAN_LENGTHS.get(compact[:2]) == len(compact) and bool(iban.is_valid(compact, check_country=False))


def _iban_length(raw: str) -> int:
    """The length of the valid IBAN `raw` starts with (0 if none): the pattern may run on into a
    following word ("es13 6428 ... 4064 before" ends with "befo" + "re")."""
    parts = re.split(r"([ \-])", raw)
    for j in range(len(parts), 0, -2):
        head = "".join(parts[:j])
        if _iban_ok(re.sub(r"[ \-]", "", head)):
            return len(head)
    return 0


def _card_ok(raw: str) -> bool:
    groups = re.split(r"[ ]*\n[ ]*|[ \-]", raw)
    digits = "".join(groups)
    if not 13 <= len(digits) <= 19 or not _CARD_PREFIX.match(digits) or not luhn_ok(digits):
        return False
    if len(groups) == 1:
        return True
    # Typed or printed card numbers come in groups (4-4-4-4, Amex 4-6-5), possibly broken across
    # a line; "1 2 3 4 ..." or mixed spaces and hyphens are tables of numbers, not a card.
    if {" ", "-"} <= set(raw):
        return False
    return all(len(g) >= 3 for g in groups[:-1])


def _phone_ok(raw: str, *, lo: int, hi: int) -> bool:
    digits = [c for c in raw if c.isdigit()]
    if not lo <= len(digits) <= hi or raw.count("(") != raw.count(")"):
        return False
    # All zeros after the trunk or country code is padding ("0000 0000 0000"), not a line.
    return any(c != "0" for c in digits[1:]) and len(set(re.findall(r"[./]", raw))) <= 1


def _email_ok(m: re.Match[str]) -> bool:
    tld, at, local, domain = m.group("tld"), m.group("at"), m.group("local"), m.group("domain")
    if tld in _NOT_TLDS:
        return False
    # "see @pytest.mark.parametrize": a spaced "@" before a dotted name is a decorator or a
    # mention unless the name ends in a real top-level domain.
    if at.strip() == "@" and at != "@" and tld not in _WORD_TLDS and len(tld) != 2:
        return False
    if _PLAIN_AT.fullmatch(at) or "[" in at or "(" in at or "{" in at or "<" in at or "%" in at or "&" in at:
        return True
    # " at ": "look at github.com" is prose. Written-out addresses spell out a dot somewhere, or
    # have an address-like local part ("jane.doe", "jdoe42", "j_doe"), and end in a real TLD.
    if tld not in _WORD_TLDS and len(tld) != 2:
        return False
    return bool(_WORD_DOT.search(domain) or _WORD_DOT.search(local) or re.search(r"[._+\d]", local))


# "git@github.com:owner/repo.git" (scp-like remote) and "ssh://git@host/..." log in to a host; they
# are not addresses. Only service accounts: "ssh://jane.doe@host" still names a person.
_REMOTE_AFTER = re.compile(r":[\w~.-]*(?:/|\Z)|:[\w.-]+\.git\b")
_SERVICE_USERS = frozenset(_words("git hg svn ssh gitlab gitea forgejo bitbucket aur cvs"))


def _is_remote(text: str, m: re.Match[str]) -> bool:
    if _REMOTE_AFTER.match(text, m.end()):
        return True
    return m.group("local") in _SERVICE_USERS and text[max(0, m.start() - 3) : m.start()] == "://"


_TOWN = re.compile(
    r",[ \t]*(?!(?:The|This|That|In|On|At|And|But|If|As|So|Then|Which|When|See)\b)[A-Z][a-z]+(?:[ -][A-Z][a-z]+)?"
    r"(?:,?[ \t]*(?:[A-Z]{2}[ \t]+\d{5}(?:-\d{4})?|[A-Z]{1,2}\d[A-Z\d]?[ \t]?\d[A-Z]{2}|\d{4,5}))?(?![\w])"
)


def _town_end(text: str, end: int) -> int:
    m = _TOWN.match(text, end)
    return m.end() if m else end


def _address_ok(m: re.Match[str]) -> bool:
    words = m.groupdict().get("words")
    return words is None or not any(w in _FUNCTION_WORDS for w in words.split())


class PiiDetector(Detector):
    """Personal-data patterns with validators that keep version numbers, dates and hashes out.

    Matching runs on the folded text (`privacy.normalize.fold`: full-width forms, homoglyphs,
    zero-width characters and case do not hide anything). Decisions on tricky inputs (tested in
    tests/privacy/test_detectors.py):

    * emails need a dotted domain with an alphabetic TLD of 2+ letters: `HEAD@{1}`, `a@b.c`
      (C macros), `user@localhost` are not emails; `git@github.com` and mailing-list Message-IDs
      (`<2024...@gmail.com>`) are, because they are address-shaped and often personal.
      Build artifacts (`gcc@13--13.2.0.bottle.tar.gz`, `icon@2x.png`) are not: their "TLD" is a file type.
      Written-out addresses ("jane dot doe at example dot com", "[at]", "(at)", " @ ", "%40") are
      emails; "look at github.com" is not (a spelled-out " at " needs a spelled-out dot or an
      address-like local part, and a real TLD).
    * phones need a `+`/`00` country code, the 3-3-4 North American shape, a national trunk `0`
      and 9-12 digits in groups of 2+ ("06 12 34 56 78", "030/1234567"), or the 3-2-2-2 shape
      of a Spanish mobile; plain digit runs (timestamps, counts), dates, times and versions never match.
    * cards need 13-19 digits, a known issuer prefix, the Luhn check and groups of 3+ digits
      (a line break may split them).
    * IBANs in either case need the country's registered length and the mod-97 check.
    * street addresses need a house number and a street type ("221b Baker Street", "12 rue de la
      Paix", "Hauptstraße 5", "Via Roma 10"); "after 5 minutes the drive" is prose.
    * IPv4 addresses exclude loopback/unspecified/broadcast, all-single-digit quads (C99 section
      "6.3.1.8", versions "1.8.0.3") and numbers right after "git", "version", "v", "section".
    * IPv6 addresses must parse, contain a decimal digit (C++ `a::b` does not) and not be loopback.
    * URL credentials: `scheme://user:password@host` (the password as pasted, "@", "#", "?" or "/"
      unencoded, up to the last "@" a host follows; "host:443/@scope" is a port and a path) or a
      token-like user of 20+ characters.
    """

    KINDS = (EMAIL, PHONE, CARD, IP, URL_CREDENTIALS, IBAN, ADDRESS)

    def __init__(self, kinds: Iterable[str] | None = None, *, hold_local_parts: bool = True) -> None:
        chosen = tuple(self.KINDS if kinds is None else kinds)
        unknown = sorted(set(chosen) - set(self.KINDS))
        if unknown:
            raise ValueError(f"unknown personal-data kind(s): {', '.join(unknown)}")
        self.kinds = frozenset(chosen)
        self.hold_local_parts = hold_local_parts

    def find(self, text: str) -> list[Span]:
        f = fold(text)
        t = f.text
        out: list[tuple[int, int, str]] = []
        k = self.kinds
        if EMAIL in k:
            out += [(m.start(), m.end(), EMAIL) for m in _EMAIL_RE.finditer(t) if _email_ok(m) and not _is_remote(t, m)]
        if URL_CREDENTIALS in k:
            out += [(m.start(), m.end(), URL_CREDENTIALS) for m in _URL_CREDENTIALS_RE.finditer(t)]
        if PHONE in k:
            out += [
                (m.start(), m.end(), PHONE) for m in _PHONE_INTL_RE.finditer(t) if _phone_ok(m.group(), lo=8, hi=15)
            ]
            out += [(m.start(), m.end(), PHONE) for m in _PHONE_NANP_RE.finditer(t)]
            out += [
                (m.start(), m.end(), PHONE) for m in _PHONE_NATIONAL_RE.finditer(t) if _phone_ok(m.group(), lo=9, hi=12)
            ]
            out += [(m.start(), m.end(), PHONE) for m in _PHONE_GROUPED_RE.finditer(t)]
        if CARD in k:
            out += [(m.start(), m.end(), CARD) for m in _CARD_RE.finditer(t) if _card_ok(m.group())]
        if IP in k:
            out += [(m.start(1), m.end(1), IP) for m in _IPV4_RE.finditer(t) if _ipv4_ok(t, m)]
            out += [(m.start(), m.end(), IP) for m in _IPV6_RE.finditer(t) if _ipv6_ok(m.group())]
        if IBAN in k:
            out += [(m.start(), m.start() + n, IBAN) for m in _IBAN_RE.finditer(t) if (n := _iban_length(m.group()))]
        if ADDRESS in k:
            for pattern in (_ADDRESS_EN, _ADDRESS_FR, _ADDRESS_DE, _ADDRESS_IBERIAN, _ADDRESS_JP):
                out += [(m.start(), m.end(), ADDRESS) for m in pattern.finditer(t) if _address_ok(m)]
        spans = [Span(*f.span(a, b), kind) for a, b, kind in out if b > a]
        # The town after a street ("12 Larch Lane, Springfield"), written with a capital on the raw text.
        spans = [Span(s.start, _town_end(text, s.end), s.kind) if s.kind == ADDRESS else s for s in spans]
        # "+1 (415) 555-0132" is also a North American "(415) 555-0132": one finding, not two.
        return merge_spans(spans)

    def hazard(self, text: str) -> Span | None:
        offset = max(0, len(text) - _HAZARD_TAIL)
        f = fold(text[offset:])
        tail = f.text
        found: list[Span] = []
        k = self.kinds

        def add(m: re.Match[str] | None, kind: str) -> None:
            if m:
                found.append(Span(offset + f.raw_start(m.start()), len(text), kind))

        if EMAIL in k:
            m = _EMAIL_HAZARD.search(tail)
            # Without local-part holds, a bare word ("loop", "patch.") is not held; "jane.doe",
            # "jane dot d" or anything with its "@" already written still is.
            bare = m is not None and _BARE_WORD.fullmatch(m.group())
            if (
                m
                and bare
                and (not self.hold_local_parts or (_HASH_LIKE.fullmatch(m.group()) and not _hex_text(m.group())))
            ):
                m = None
            # "actions/checkout@8e5e7e5a...", "pkg@3f9a...": a commit or digest after the "@" is a
            # ref, not a domain being written (a domain has a dot and no 12+ hex run for a name);
            # held, it would never resolve within the look-ahead and fail closed.
            if m and "@" in m.group():
                domain = m.group().rsplit("@", 1)[1]
                if _HASH_LIKE.fullmatch(domain) and not _hex_text(domain):
                    m = None
            add(m, EMAIL)
            # "git@host:" at the end may still be a remote's path or an address followed by a colon.
            for e in _EMAIL_RE.finditer(tail):
                if _email_ok(e) and re.fullmatch(r":[\w~.-]*", tail[e.end() :]):
                    add(e, EMAIL)
            # Letters spaced out one by one may still become an address ("j o h" of "j o h n @ ...").
            add(_SPACED_HAZARD.search(tail), EMAIL)
        if URL_CREDENTIALS in k:
            add(_URL_HAZARD.search(tail), URL_CREDENTIALS)
        if k & {PHONE, CARD, IP}:
            m = _DIGITS_HAZARD.search(tail)
            # Three digits can still become a phone, card or address; "+" or "(" announce a phone.
            if m and (sum(c.isdigit() for c in m.group()) >= 3 or m.group()[0] in "+("):
                add(m, PHONE if PHONE in k else CARD if CARD in k else IP)
        if IP in k:
            m = _IPV6_HAZARD.search(tail)
            add(m if m and any(c.isdigit() for c in m.group()) else None, IP)
        if IBAN in k:
            add(_IBAN_HAZARD.search(tail), IBAN)
        if ADDRESS in k:
            m = _ADDRESS_HAZARD.search(tail)
            add(m if m and not any(w in _FUNCTION_WORDS for w in m.group().split()[1:]) else None, ADDRESS)
            if self.hold_local_parts:  # not at the end of a text: a word written whole stays a word
                cue = _ADDRESS_CUE_HAZARD.search(text[-64:])
                if cue is not None:
                    word = re.search(r"[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)?\Z", cue.group())
                    if word is not None:
                        found.append(Span(len(text) - len(cue.group()) + word.start(), len(text), ADDRESS))
            # A complete street may still take its postcode and city (", 75002 Paris").
            for pattern in (_ADDRESS_EN, _ADDRESS_FR, _ADDRESS_DE, _ADDRESS_IBERIAN):
                for m in pattern.finditer(tail):
                    if _address_ok(m) and _ADDRESS_GROWS.fullmatch(tail, m.end()):
                        add(m, ADDRESS)
        return min(found, default=None)


def _ipv4_ok(text: str, m: re.Match[str]) -> bool:
    quad = m.group(1)
    octets = [int(x) for x in quad.split(".")]
    if all(o < 10 for o in octets):
        return False
    addr = ipaddress.IPv4Address(quad)
    if addr.is_loopback or addr.is_unspecified or quad == "255.255.255.255":
        return False
    return not _VERSION_CONTEXT.search(text[max(0, m.start(1) - 12) : m.start(1)])


def _ipv6_ok(raw: str) -> bool:
    addr_text = raw.split("%", 1)[0]
    if not any(c.isdigit() for c in addr_text) or ("::" not in addr_text and addr_text.count(":") != 7):
        return False
    try:
        addr = ipaddress.IPv6Address(addr_text)
    except ValueError:
        return False
    return not (addr.is_loopback or addr.is_unspecified)
