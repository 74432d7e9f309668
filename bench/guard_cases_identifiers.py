"""Identifiers a keyword announces or a shape gives away, for the egress guard's recall (attack 12).

Like `bench.guard_cases_adversarial`, this module imports nothing of the guard's: every category is
written from a description of how people write the thing (a wifi password told to a guest, a
seed phrase copied from a backup card, a tax number in a form), from a seed, with synthetic values
(checksums computed here, from the published algorithms, on random digits).

* `positives`: one sentence per case, its span marked by character range, in `CATEGORIES`;
* `developer_text`: sentences that use the same keywords without a value ("the password is read
  from the keychain", "private key is 2048 bits", "exit code 1234"): the false-positive side.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable

__all__ = ["CATEGORIES", "DEVELOPER_KINDS", "developer_text", "positives"]

Written = tuple[str, tuple[tuple[int, int], ...]]

# A sample of English words of the BIP-39 list (a seed phrase is 12 or 24 of its 2048 words).
BIP39_SAMPLE = str.split(
    """abandon ability absorb abstract acoustic adapt advice afford agent alarm album alley anchor angle
    ankle apple arena armor arrow artist atom auction august autumn avocado bacon badge balance bamboo
    banner barrel basket beach bench bicycle bitter blanket blossom bonus border bounce bracket brave
    breeze brick bronze bubble budget buffalo cabin cactus camera canal candy canoe canyon carbon cargo
    carpet castle catalog cattle cereal chalk chapter cherry chimney circle citizen clay cliff clinic
    clock cloud coconut coffee coral cotton cousin coyote cradle crater crystal cushion dawn debris
    decade dentist desert diamond dinosaur dolphin donkey dragon drift eagle echo elbow elephant empower
    engine enrich envelope equip erode essay exotic fabric fancy fence festival fiber fiction filter
    flame flock foam fossil fragile frost furnace galaxy garlic gauge gesture ginger giraffe glimpse
    gorilla gravity habit hammer harbor harvest hazard hedgehog helmet hobby hockey hurdle husband
    impulse inch inmate island ivory jacket jaguar jelly jungle kangaroo kiwi ladder laptop lava lemon
    leopard library lizard lobster lumber lunar lyrics magnet mammal mango marble meadow melody mercy
    mimic monkey mosquito muffin museum napkin nephew noodle olive onion orbit orchard ostrich oyster
    paddle panda panther parrot peanut pelican pepper piano pigeon pistol planet plastic pony pumpkin
    puzzle pyramid rabbit raccoon radar raven razor rhythm ribbon rocket saddle salmon sausage scorpion
    shrimp silk sketch slogan snack spider sponsor squirrel stadium sunset swamp tiger tobacco tomato
    tornado tortoise trumpet tunnel turtle twin umbrella vacuum valley velvet violin volcano walnut
    wheat whisper wisdom wolf zebra zoo"""
)


def _d(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _in(template: str, x: str) -> Written:
    start = template.index("{x}")
    return template.replace("{x}", x), ((start, start + len(x)),)


def _say(rng: random.Random, templates: list[str], x: str) -> Written:
    return _in(rng.choice(templates), x)


# -- secrets told in words -----------------------------------------------------------------------


def password_told(rng: random.Random) -> Written:
    word = rng.choice(["Marigold", "sunflower", "Tidewater", "copperfield", "Halcyon", "bluejay", "Pinecone"])
    value = word + str(rng.randint(10, 2030)) + rng.choice(["", "!", "?", "#", "$", "*"])
    return _say(
        rng,
        [
            "For the guests: the wifi password is {x} and the network is the one with the cat emoji.",
            "The router password was {x} before I reset it.",
            "Alarm panel admin password: {x} (change it later).",
            "My old email password is {x}, please do not share it.",
        ],
        value,
    )


def pin_told(rng: random.Random) -> Written:
    value = _d(rng, rng.choice([4, 4, 5, 6, 8]))
    if len(set(value)) < 2:
        value = "7" + value[1:]
    return _say(
        rng,
        [
            "Garage pin {x} opens the side door.",
            "The door code is {x} for the weekend.",
            "My bank PIN: {x}",
            "Use passcode {x} on the tablet.",
            "The alarm code {x} disarms the hallway sensor.",
        ],
        value,
    )


def key_told(rng: random.Random) -> Written:
    hexkey = "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice([32, 40, 64])))
    lower = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(32))
    value = rng.choice([hexkey, lower])
    return _say(
        rng,
        [
            "The api key is {x} for the staging weather service.",
            "privkey {x}",
            "DD_API_KEY {x} goes in the agent config.",
            "Set the secret key: {x} before the deploy.",
            "My wallet private key is {x}, keep it safe.",
        ],
        value,
    )


def _b32(rng: random.Random) -> str:
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))


def vendor_token_more(rng: random.Random) -> Written:
    form = rng.choice(["hf", "mailgun", "shopify", "totp", "otpauth", "eth", "btc"])
    if form == "hf":
        x = "hf_" + "".join(rng.choice(string.ascii_letters) for _ in range(34))
    elif form == "mailgun":
        x = "key-" + "".join(rng.choice("0123456789abcdef") for _ in range(32))
    elif form == "shopify":
        x = "shpat_" + "".join(rng.choice("0123456789abcdef") for _ in range(32))
    elif form == "totp":
        seed = _b32(rng)
        x = " ".join(seed[i : i + 4] for i in range(0, 16, 4))
        return _in("Authenticator secret is {x}, scan it on the new phone.", x)
    elif form == "otpauth":
        x = f"otpauth://totp/Example:me?secret={_b32(rng)}&issuer=Example"
    elif form == "eth":
        x = "0x" + "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(40))
    else:
        x = "bc1q" + "".join(rng.choice("qpzry9x8gf2tvdw0s3jn54khce6mua7l") for _ in range(38))
    return _say(rng, ["Send it to {x} when you can.", "Token for the shop: {x}", "Use {x} for the login."], x)


def seed_phrase(rng: random.Random) -> Written:
    words = rng.sample(BIP39_SAMPLE, rng.choice([12, 12, 24]))
    layout = rng.choice(["spaces", "commas", "numbered", "lines", "upper", "hyphens"])
    if layout == "spaces":
        x = " ".join(words)
    elif layout == "commas":
        x = ", ".join(words)
    elif layout == "numbered":
        x = " ".join(f"{i}. {w}" for i, w in enumerate(words, 1))
    elif layout == "lines":
        x = "\n".join(words)
    elif layout == "upper":
        x = " ".join(w.upper() for w in words)
    else:
        x = "-".join(words)
    return _say(rng, ["Recovery words:\n{x}\nKeep this card offline.", "{x}", "backup {x} done"], x)


# -- national identifiers ------------------------------------------------------------------------


def _cpf(rng: random.Random) -> str:
    d = [int(c) for c in _d(rng, 9)]
    for n in (10, 11):
        s = sum(v * (n - i) for i, v in enumerate(d)) % 11
        d.append(0 if s < 2 else 11 - s)
    x = "".join(map(str, d))
    return rng.choice([f"{x[:3]}.{x[3:6]}.{x[6:9]}-{x[9:]}", x])


def _verhoeff_digit(num: str) -> str:
    d = [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        [1, 2, 3, 4, 0, 6, 7, 8, 9, 5],
        [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
        [3, 4, 0, 1, 2, 8, 9, 5, 6, 7],
        [4, 0, 1, 2, 3, 9, 5, 6, 7, 8],
        [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
        [6, 5, 9, 8, 7, 1, 0, 4, 3, 2],
        [7, 6, 5, 9, 8, 2, 1, 0, 4, 3],
        [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
        [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
    ]
    p = [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        [1, 5, 7, 6, 2, 8, 3, 0, 9, 4],
        [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
        [8, 9, 1, 6, 0, 4, 3, 5, 2, 7],
        [9, 4, 5, 3, 1, 2, 6, 8, 7, 0],
        [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
        [2, 7, 9, 3, 8, 0, 6, 4, 1, 5],
        [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
    ]
    inv = [0, 4, 3, 2, 1, 5, 6, 7, 8, 9]
    c = 0
    for i, ch in enumerate(reversed(num)):
        c = d[c][p[(i + 1) % 8][int(ch)]]
    return str(inv[c])


def _aadhaar(rng: random.Random) -> str:
    body = str(rng.randint(2, 9)) + _d(rng, 10)
    x = body + _verhoeff_digit(body)
    return rng.choice([f"{x[:4]} {x[4:8]} {x[8:]}", x])


def _mod11_10(body: str) -> str:
    """ISO 7064 MOD 11,10 (the German Steuer-ID's check digit)."""
    product = 10
    for ch in body:
        total = (int(ch) + product) % 10 or 10
        product = (total * 2) % 11
    return str((11 - product) % 10)


def _steuer_id(rng: random.Random) -> str:
    while True:
        body = str(rng.randint(1, 9)) + _d(rng, 9)
        counts = sorted(body.count(c) for c in set(body))
        if counts[-1] in (2, 3) and counts[-2] == 1:  # one digit twice or thrice, as issued
            x = body + _mod11_10(body)
            return rng.choice([f"{x[:2]} {x[2:5]} {x[5:8]} {x[8:]}", x])


def _pan(rng: random.Random) -> str:
    up = string.ascii_uppercase
    return (
        "".join(rng.choice(up) for _ in range(3)) + rng.choice("PCHFAT") + rng.choice(up) + _d(rng, 4) + rng.choice(up)
    )


def _tfn(rng: random.Random) -> str:
    weights = [1, 4, 3, 7, 5, 8, 6, 9, 10]
    while True:
        x = _d(rng, 9)
        if sum(int(c) * w for c, w in zip(x, weights, strict=True)) % 11 == 0:
            return f"{x[:3]} {x[3:6]} {x[6:]}"


def _ssn(rng: random.Random) -> str:
    area = rng.choice([n for n in range(1, 900) if n != 666])
    return f"{area:03d}{rng.randint(1, 99):02d}{rng.randint(1, 9999):04d}"


def national_id_more(rng: random.Random) -> Written:
    form = rng.choice(["cpf", "aadhaar", "pan", "steuer", "tfn", "ssn"])
    if form == "cpf":
        return _say(rng, ["Meu CPF é {x}.", "CPF: {x}", "cadastro com CPF {x} ok"], _cpf(rng))
    if form == "aadhaar":
        return _say(rng, ["my aadhaar is {x} for the KYC form", "Aadhaar: {x}"], _aadhaar(rng))
    if form == "pan":
        return _say(rng, ["PAN: {x}", "my PAN card number is {x}"], _pan(rng))
    if form == "steuer":
        return _say(rng, ["Meine Steuer-ID ist {x}.", "tax id {x} for the refund"], _steuer_id(rng))
    if form == "tfn":
        return _say(rng, ["my tax file number is {x}", "TFN {x}"], _tfn(rng))
    return _say(rng, ["SSN {x}", "social security number: {x}"], _ssn(rng))


def document_number(rng: random.Random) -> Written:
    up = string.ascii_uppercase
    passport = rng.choice(up) + _d(rng, 8) if rng.random() < 0.5 else _d(rng, 2) + rng.choice(up) * 2 + _d(rng, 5)
    licence = rng.choice(up) + _d(rng, 3) + "-" + _d(rng, 4) + "-" + _d(rng, 4)
    if rng.random() < 0.5:
        return _say(rng, ["passport no. {x}", "My passport number is {x} and it expires in May."], passport)
    return _say(rng, ["my driver's license number is {x}", "Driving licence: {x}"], licence)


# -- quasi-identifiers ---------------------------------------------------------------------------

MONTHS = ("January", "March", "April", "July", "September", "November", "Feb", "Oct")


def date_of_birth(rng: random.Random) -> Written:
    d, m, y = rng.randint(1, 28), rng.randint(1, 12), rng.randint(1940, 2010)
    x = rng.choice(
        [f"{d} {rng.choice(MONTHS)} {y}", f"{m:02d}/{d:02d}/{y}", f"{d:02d}.{m:02d}.{y}", f"{y}-{m:02d}-{d:02d}"]
    )
    return _say(rng, ["born {x} in Lisbon", "DOB: {x}", "date of birth is {x}", "geb. {x}", "né le {x}"], x)


def mac_address(rng: random.Random) -> Written:
    octets = [f"{rng.randint(0, 255):02x}" for _ in range(6)]
    octets[0] = f"{rng.randint(1, 255):02x}"
    sep = rng.choice([":", "-"])
    x = sep.join(octets)
    if rng.random() < 0.3:
        x = x.upper()
    return _say(rng, ["my laptop's MAC is {x}", "whitelist {x} on the router", "NAS hw address {x}"], x)


def gps_coordinates(rng: random.Random) -> Written:
    lat, lon = rng.uniform(-80, 80), rng.uniform(-179, 179)
    x = rng.choice(
        [
            f"{lat:.5f}, {lon:.5f}",
            f"{abs(lat):.4f}° {'N' if lat >= 0 else 'S'}, {abs(lon):.4f}° {'E' if lon >= 0 else 'W'}",
        ]
    )
    return _say(rng, ["home: {x}", "GPS {x} is the cabin", "meet me at {x} tomorrow", "coordinates {x}"], x)


def ipv4_defanged(rng: random.Random) -> Written:
    q = [
        rng.choice([10, 172, 192, rng.randint(11, 223)]),
        rng.randint(0, 255),
        rng.randint(0, 255),
        rng.randint(1, 254),
    ]
    sep = rng.choice(["[.]", " dot ", "(.)", " . "])
    x = sep.join(map(str, q))
    return _say(rng, ["my home box is {x}", "VPN into {x} first", "the camera sits at {x}"], x)


# -- phones, addresses, bank details -------------------------------------------------------------


def phone_unseparated(rng: random.Random) -> Written:
    area = f"{rng.randint(2, 9)}{rng.randint(0, 8)}{rng.randint(0, 9)}"
    exch = f"{rng.randint(2, 9)}{rng.randint(0, 9)}{rng.randint(0, 9)}"
    if area[1:] == "11":
        area = area[0] + "21"
    if exch[1:] == "11":
        exch = exch[0] + "21"
    form = rng.choice(["run", "wa", "tel"])
    if form == "run":
        return _say(rng, ["my cell is {x}", "text {x} when you land"], area + exch + _d(rng, 4))
    cc = rng.choice(["44", "33", "49", "1", "351"])
    x = cc + _d(rng, 10 if cc == "1" else 9)
    if form == "wa":
        return _in(rng.choice(["ping me on https://{x}", "WhatsApp: {x}"]), "wa.me/" + x)
    return _in(rng.choice(["call <{x}>", "the footer links {x} now"]), "tel:" + x)


TOWNS = ("Kingsbridge", "Fairview", "Ashford", "Millbrook")


def postal_more(rng: random.Random) -> Written:
    if rng.random() < 0.5:
        x = f"P.O. Box {rng.randint(10, 9999)}, {rng.choice(TOWNS)}"
        return _say(rng, ["send it to {x}", "mail goes to {x} now"], x)
    street = (
        rng.choice(["Quayside", "Saltmarsh", "Brambling", "Hollyhock"]) + " " + rng.choice(["Street", "Road", "Lane"])
    )
    x = f"{street} {rng.randint(1, 300)}, Unit {rng.randint(1, 20)}{rng.choice('AB')}, {rng.choice(TOWNS)}"
    return _say(rng, ["I live at {x}", "the new flat: {x}"], x)


def _rtn(rng: random.Random) -> str:
    while True:
        x = _d(rng, 8)
        for c in string.digits:
            y = x + c
            if sum(int(a) * w for a, w in zip(y, [3, 7, 1] * 3, strict=True)) % 10 == 0:
                return y


def _iban_de(rng: random.Random) -> str:
    bban = _d(rng, 18)
    n = int("".join(str(int(c, 36)) for c in bban + "DE00"))
    return f"DE{98 - n % 97:02d}{bban}"


def bank_details(rng: random.Random) -> Written:
    form = rng.choice(["sort", "routing", "iban"])
    if form == "sort":
        x = f"{_d(rng, 2)}-{_d(rng, 2)}-{_d(rng, 2)}, account {_d(rng, 8)}"
        return _say(rng, ["pay me: sort code {x}", "Sort code {x} please"], x)
    if form == "routing":
        x = f"{_rtn(rng)} acct {_d(rng, rng.randint(8, 12))}"
        return _say(rng, ["wire to routing {x}", "ABA {x} for the refund"], x)
    iban = _iban_de(rng)
    x = ".".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    return _say(rng, ["IBAN {x}", "transfer to {x} today"], x)


CATEGORIES: dict[str, Callable[[random.Random], Written]] = {
    "password after is/was/:": password_told,
    "PIN or door code": pin_told,
    "key value after a key keyword": key_told,
    "vendor token, TOTP seed, wallet address": vendor_token_more,
    "wallet seed phrase": seed_phrase,
    "national identifier (CPF, Aadhaar, PAN, Steuer-ID, TFN, SSN)": national_id_more,
    "passport or licence number": document_number,
    "date of birth": date_of_birth,
    "MAC address": mac_address,
    "GPS coordinates": gps_coordinates,
    "IPv4 defanged or spelled": ipv4_defanged,
    "phone: unseparated, wa.me, tel:": phone_unseparated,
    "P.O. box, street before number": postal_more,
    "bank details (sort code, routing, dotted IBAN)": bank_details,
}


def positives(rng: random.Random, per_category: int) -> list[tuple[str, str, tuple[tuple[int, int], ...]]]:
    """(category, text, spans) for `per_category` cases of each category."""
    return [(cat, *write(rng)) for cat, write in CATEGORIES.items() for _ in range(per_category)]


# -- the same keywords in ordinary developer text -------------------------------------------------

DEVELOPER_KINDS: dict[str, Callable[[random.Random], str]] = {
    "password / key keyword, no value": lambda r: r.choice(
        [
            "The password is read from the keychain on startup.",
            "The password is required when the token has expired.",
            f"private key is {r.choice([2048, 3072, 4096])} bits by default.",
            f"secret key length must be {r.choice([16, 32, 64])} bytes.",
            "In the docs the example password is hunter2, which nobody should use.",
            "The api key is passed through the environment, never the command line.",
            "password: see the vault entry for the staging database.",
            f"Use abc123 as the password in the fixture only (test {r.randint(1, 99)}).",
        ]
    ),
    "code and pin keyword, no value": lambda r: r.choice(
        [
            f"exit code {r.randint(1000, 9999)} means the lock was held.",
            f"error code {r.randint(1000, 9999)} comes from the upstream API.",
            f"PIN the dependency to {r.randint(1, 9)}.{r.randint(0, 30)}.{r.randint(0, 9)} until the fix lands.",
            f"status code {r.choice([200, 404, 503])} is retried {r.randint(2, 5)} times.",
        ]
    ),
    "birth and document keyword, no value": lambda r: r.choice(
        [
            "born in London, the maintainer moved the project to Leeds.",
            "The passport field is optional in the signup form.",
            f"Born-again build: rerun after {r.randint(2, 60)} minutes.",
            "The account number field is validated on the server.",
            f"AWS account {r.randint(10**11, 10**12 - 1)} owns the bucket.",
        ]
    ),
    "numbers that are not identifiers": lambda r: r.choice(
        [
            f"took {r.randint(1_600_000_000, 1_800_000_000)} ms in total",
            f"ratios {r.uniform(0, 50):.2f}, {r.uniform(0, 50):.2f} after the fix",
            f"order {r.randint(10**9, 10**10 - 1)} shipped to the warehouse",
            f"the {r.randint(2, 9)} dot {r.randint(0, 9)} release",
            f"hexdump row {' '.join(f'{r.randint(0, 255):02x}' for _ in range(8))}",
            f"tests cover {r.randint(10, 99)}.{r.randint(10, 99)}% of lines",
        ]
    ),
    "list words in prose": lambda r: r.choice(
        [
            "Fix the build and add a test for the cache before we move the old code into a new file.",
            "Update the guide, remove the sample and check the version of the library again.",
            "We found a bug in the login flow and the team will fix it soon.",
        ]
    ),
}


def developer_text(rng: random.Random, per_kind: int) -> list[tuple[str, str]]:
    """(kind, sentence) pairs that use the categories' keywords without a value."""
    return [(kind, make(rng)) for kind, make in DEVELOPER_KINDS.items() for _ in range(per_kind)]
