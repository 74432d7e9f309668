/**
 * Port of privacy/pii.py. Personal-data patterns: emails (also written out), phone numbers,
 * payment cards, IPv4/IPv6 addresses, URLs carrying credentials, IBANs and street addresses
 * (`PiiDetector`).
 *
 * Every pattern matches the folded text (`fold(text).text`: NFKC, confusables folded, lower case;
 * spans map back to the raw text), and validators (Luhn, issuer prefixes, IBAN lengths and mod
 * 97, address shapes) keep version numbers, dates and hashes out. Each detector also reports a
 * hazard: the end of a text that could still grow into a match.
 */

import { IBAN_COUNTRIES } from "./data/iban.js";
import { fold } from "./normalize.js";
import { caseless, fullMatchIn, lastChars, tailStart } from "./pystr.js";
import { B, D, END, NOT_S, S, S_IN, W, W_IN, fullMatch, matchAt, splitWords } from "./pyre.js";
import {
  ADDRESS,
  CARD,
  EMAIL,
  IBAN,
  IP,
  PHONE,
  URL_CREDENTIALS,
  type Detector,
  Span,
  compareSpans,
  mergeSpans,
} from "./spans.js";

const words = (text: string): ReadonlySet<string> => new Set(splitWords(text));

// File extensions that follow an '@' in build artifacts and retina images ("gcc@13--13.2.0.bottle.tar.gz",
// "icon@2x.png"). None is an IANA top-level domain, so skipping them loses no real address.
const NOT_TLDS = words(
  "gz tgz bz2 xz zst lz tar txt log json yaml yml toml cfg ini png jpg jpeg gif svg webp bmp ico patch " +
    "diff orig rej lock bak tmp swp exe dll dylib cc cpp cxx hpp hh pyc obj",
);

// Top-level domains an address written out in words ("jane at example dot com") ends with: the
// generic ones in common use, the reserved ones of RFC 2606/6761, and any two-letter country code.
const WORD_TLDS = words(
  "com org net edu gov mil int info biz name pro mobi app dev io ai me co tv xyz online site tech email " +
    "cloud page blog shop store live world today space website club invalid test example local localhost " +
    "internal arpa",
);

// Letters of the alphabets that put spaces between words, beside ASCII: Latin with diacritics,
// Greek, Cyrillic (IDN addresses, which the folding leaves as they are). Not Chinese, Japanese,
// Korean or Thai: written without spaces, their text runs into an address and would swallow it.
const GREEK_CYRILLIC = "\u0370-\u03ff\u0400-\u04ff";
const LETTERS = `a-z0-9\u00c0-\u024f${GREEK_CYRILLIC}`;
/** A character of an address's local part or a label, besides the dot. */
const L = `[${LETTERS}_%+-]`;
const DOT = String.raw`(?:${S}*[\[\(\{<]${S}*dot${S}*[\]\)\}>]${S}*|${S}+dot${S}+|\.)`;
const AT_BODY = String.raw`${S}*[\[\(\{<]${S}*at${S}*[\]\)\}>]${S}*|${S}+at${S}+|${S}*(?:@|%40|&#0*64;|&commat;)${S}*`;
const LABEL = `[${LETTERS}](?:[${LETTERS}-]{0,61}[${LETTERS}])?`;
// An address in any of its written forms: "jane.doe@example.com", "jane dot doe at example dot com",
// "jane.doe [at] example [dot] com", "jane.doe (at) example.com", "jane.doe @ example.com", "%40".
const EMAIL_SOURCE =
  `(?<![${LETTERS}._%+-])(?<local>${L}{1,64}(?:${DOT}${L}{1,64}){0,8})` +
  `(?<at>${AT_BODY})(?<domain>(?:${LABEL}${DOT}){1,6}(?<tld>[a-z${GREEK_CYRILLIC}]{2,24}))(?![${LETTERS}-])`;
const EMAIL_RE = new RegExp(EMAIL_SOURCE, "gu");
const PLAIN_AT = new RegExp(`${S}*@${S}*`, "u");
const WORD_DOT = new RegExp(String.raw`${S}+dot${S}+|[\[\(\{<]${S}*dot`, "u");

// Phone numbers: separators between digit groups are one of " . - /" (slashes after an area code,
// "030/1234567"); the area code may sit in parentheses; the country code is "+CC" or "00CC".
const PSEP = String.raw`(?:[ .\-/]|${S}?[/-]${S}?)`;
const PHONE_INTL_RE = new RegExp(
  String.raw`(?<![${W_IN}+.])(?:\+|${B}00)[1-9]${D}{0,2}(?:${S}?\(0\))?(?:${PSEP}?\(?${D}{1,5}\)?){1,7}(?!${D}|[.\-/]${D})`,
  "gu",
);
// National numbers with a trunk 0: "030 1234567", "06 12 34 56 78", "06.12.34.56.78", "0171/1234567",
// "020 7946 0958", "03-1234-5678", "(030) 1234567", "0612345678".
const PHONE_NATIONAL_RE = new RegExp(
  String.raw`(?<![${W_IN}.+\-/])(?:\(0${D}{1,5}\)|0${D}{1,5})(?:${PSEP}${D}{2,8}){1,5}(?![${W_IN}\-/]|\.${D})` +
    String.raw`|(?<![${W_IN}.+\-/])0[1-9]${D}{8,9}(?![${W_IN}\-/]|\.${D})`,
  "gu",
);
// North American "(415) 555-0132", "415-555-0132", "1-415-555-0132", "415/555-0132"; dates never fit 3-3-4.
const PHONE_NANP_RE = new RegExp(
  String.raw`(?<![${W_IN}.+\-/])(?:1[ .\-])?(?:\(${D}{3}\)[ ]?|${D}{3}[-. /])${D}{3}[-. ]${D}{4}(?![${W_IN}\-/]|\.${D})`,
  "gu",
);
// Spanish-style national mobiles without a trunk: "612 34 56 78".
const PHONE_GROUPED_RE = new RegExp(
  String.raw`(?<![${W_IN}.+\-/])[6-9]${D}{2}(?: ${D}{2}){3}(?![${W_IN}\-/]|\.${D})`,
  "gu",
);

// Card numbers: 13-19 digits, in groups separated by a space, a hyphen or a line break.
const CARD_RE = new RegExp(
  String.raw`(?<![${W_IN}.,-])${D}(?:(?:[ \-]|[ ]*\n[ ]*)?${D}){12,18}(?![${W_IN}-]|[.,]${D})`,
  "gu",
);
const OCTET = String.raw`(?:25[0-5]|2[0-4]${D}|1${D}${D}|[1-9]?${D})`;
const IPV4_RE = new RegExp(String.raw`(?<![${W_IN}.-])(?:${OCTET}\.){3}${OCTET}(?![${W_IN}-]|\.${D})`, "gu");
// Version strings that happen to have four numeric parts ("Git 1.8.0.3", "version 2.39.2.1").
const VERSION_CONTEXT = new RegExp(
  String.raw`(?:${B}git|${B}version|${B}release|${B}v|${B}section|§|${B}c${D}${D})${S}*$`,
  "u",
);
const IPV6_RE = new RegExp(String.raw`(?<![${W_IN}:.])(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:%[a-z0-9]+)?(?![${W_IN}:])`, "gu");
// A URL's userinfo (RFC 3986: scheme://userinfo@host). A password as people paste it need not be
// percent-encoded: it may hold "@", "#", "?" or "/", so it runs to the *last* "@" that a host (and
// port) follows. The user part has none of ":/?#@" ("https://host:443/@types/node" is a port and a
// path, not a user and a password), and a password of digits then "/" is a port.
const URL_CREDENTIALS_RE = new RegExp(
  String.raw`(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{1,15}://` +
    String.raw`(?:[^${S_IN}/?#@:]*:(?!${D}{1,5}(?:[/?#]|${END}))${NOT_S}+?|[a-z0-9_-]{20,})` +
    String.raw`@[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::${D}{1,5})?(?![^${S_IN}/?#.,;:)\]>'"])`,
  "gu",
);
// IBANs in either case, grouped by fours or not: checked against the country's length and mod 97.
const IBAN_RE = new RegExp(
  String.raw`(?<![a-z0-9])[a-z]{2}${D}{2}(?:[ \-]?[a-z0-9]{4}){2,7}(?:[ \-]?[a-z0-9]{1,3})?(?![a-z0-9])`,
  "gu",
);

// Street addresses: "221b baker street", "1600 pennsylvania avenue nw", "12 rue de la paix",
// "hauptstrasse 5" ("straße" folds to "strasse"), "via roma 10", "calle mayor 5, 28013 madrid".
const STREET_TYPES =
  String.raw`street|st\.?|avenue|ave\.?|road|rd\.?|boulevard|blvd\.?|lane|ln\.?|drive|dr\.?|court|ct\.?|place|pl\.?` +
  String.raw`|terrace|way|square|sq\.?|parkway|pkwy\.?|highway|hwy\.?|crescent|close|circle|cir\.?|trail|row|gardens` +
  String.raw`|grove|mews|alley|plaza`;
const FUNCTION_WORDS = words(
  "the a an of to in on at for and or but with this that these those is are was were be been it its " +
    "by from as into than then so not no all any each every our your their his her my we you they " +
    "more less most least same other another new old first last next after before about over under " +
    "minutes seconds hours days times lines bytes files commits tests ways steps",
);
// Python's `_POSTCODE[:-1]`: the postcode group without its final "?" (required after a city).
const POSTCODE_GROUP =
  String.raw`(?:,?${S}*(?:${D}{4,5}|[a-z]{1,2}${D}[a-z${D}]?${S}?${D}[a-z]{2}|[a-z]{2}${S}+${D}{5}(?:-${D}{4})?)` +
  String.raw`(?:${S}+[a-z][a-z-]{2,})?)`;
const ADDRESS_EN = new RegExp(
  String.raw`(?<![${W_IN}.\-/])(?:(?:flat|apt\.?|apartment|suite|unit)${S}*${D}{1,4}[a-z]?,?${S}+)?` +
    String.raw`${D}{1,5}[a-z]?,?${S}+(?<words>(?:[a-z][a-z'.-]*${S}+){1,3})` +
    String.raw`(?:${STREET_TYPES})(?!${W})(?:${S}+(?:n|s|e|w|ne|nw|se|sw)${B})?` +
    String.raw`(?:,${S}*[a-z][a-z-]{2,}(?:${S}[a-z][a-z-]{2,})?${POSTCODE_GROUP})?`, // a city only with its postcode
  "gu",
);
const ADDRESS_FR = new RegExp(
  String.raw`(?<![${W_IN}.\-/])${D}{1,4}(?:${S}?(?:bis|ter))?,?${S}+` +
    "(?:rue|avenue|boulevard|bd|place|chemin|allee|impasse|quai|cours)" +
    String.raw`${S}+(?:(?:de|du|des|la|le|l'|d')${S}*){0,2}[a-z][a-z'-]{2,}(?:-[a-z][a-z'-]+)*` +
    String.raw`(?:,?${S}*${D}{5}(?:${S}+[a-z][a-z-]{2,})?)?`,
  "gu",
);
// Street names that end in their type, German, Dutch and Nordic ("Hauptstrasse 5", "Herengracht
// 111", "Kastanjestraat 193-2" with its floor, "Oudezijds Voorburgwal 100", "Storgatan 4").
const SUFFIX_STREETS =
  String.raw`strasse|str\.|weg|platz|allee|gasse|straat|gracht|laan|plein|kade|singel|dijk|burgwal|steeg|markt` +
  String.raw`|gatan|gata|vagen|vej|gade|katu|tie`;
const ADDRESS_DE = new RegExp(
  String.raw`(?<![${W_IN}.\-/])(?:[a-z][a-z-]{2,}${S}(?=[a-z-]*(?:str(?:asse|\.)|burgwal|gracht)))?[a-z-]*(?:` +
    SUFFIX_STREETS +
    String.raw`)${S}+${D}{1,4}[a-z]?(?:-${D}{1,3}|-?[a-z](?![a-z]))?` +
    String.raw`(?!${W}|\.${D})` +
    String.raw`(?:,?${S}*${D}{4,5}(?:${S}+[a-z][a-z-]{2,})?)?`,
  "gu",
);
// A street type before the name: Italian, Spanish ("C/" for calle, with the floor and door after
// it: "C/ de Sants 31, 6º 1ª"), Portuguese, Polish ("ul. Długa 14 m. 3": the flat after "m.").
const PREFIX_STREETS =
  String.raw`via|viale|piazza|corso|calle|c/|avda\.?|avenida|plaza|paseo|rua|praca|ul\.|ulica|al\.|aleja|os\.|pl\.`;
const ADDRESS_IBERIAN = new RegExp(
  String.raw`(?<![${W_IN}.\-/])(?:${PREFIX_STREETS})${S}*(?:(?:de|del|la|di|da|do|dei|delle)${S}+){0,2}` +
    String.raw`[a-z][a-z'-]{2,}(?:${S}+[a-z][a-z'-]{2,})?,?${S}+${D}{1,4}(?![${W_IN}.])` +
    String.raw`(?:,?${S}*${D}{1,2}${S}?[oa°]\.?(?:${S}*${D}{1,2}${S}?[oa°]\.?)?(?!${W}))?(?:${S}+m\.${S}*${D}{1,4})?` +
    String.raw`(?:,?${S}*${D}{5}(?:${S}+[a-z][a-z-]{2,})?)?`,
  "gu",
);
// A Japanese address after its postal mark: "〒150-0002 東京都渋谷区渋谷2-21-1".
const ADDRESS_JP = new RegExp(
  String.raw`〒${S}?${D}{3}-?${D}{4}(?:${S}?[\u3005\u3040-\u30ff\u4e00-\u9fff${D}\-]+)?`,
  "gu",
);
const ADDRESS_PATTERNS = [ADDRESS_EN, ADDRESS_FR, ADDRESS_DE, ADDRESS_IBERIAN, ADDRESS_JP];

// Hazards: the end of the text could still grow into one of the patterns above. An address's
// local part is held before its "@" arrives ("jane.doe" of "jane.doe@example.com"), as are the
// spelled-out forms ("jane dot doe at exa"): any run that a few more characters could turn into
// an address stays on the device until it dissolves or completes.
const HAZARD_TAIL = 128;
/** A dot, as far as written. */
const DOTP = String.raw`(?:${S}*[\[\(\{<]${S}*(?:d(?:o(?:t${S}*[\]\)\}>]?${S}*)?)?)?|${S}+(?:d(?:o(?:t${S}*)?)?)?|\.)`;
const ATP =
  String.raw`(?:${S}*[\[\(\{<]${S}*(?:a(?:t${S}*)?)?|${S}+(?:a(?:t${S}*)?)?` +
  String.raw`|${S}*@?|${S}*%4?|${S}*&(?:#${D}*|c[a-z]*)?)`;
const EMAIL_HAZARD = new RegExp(
  `(?<![${LETTERS}._%+-])${L}+(?:${DOT}${L}+)*` +
    `(?:${DOTP}|${ATP}|(?:${AT_BODY})(?:[${LETTERS}-]+(?:${DOT}[${LETTERS}-]+)*${DOTP}?)?)?${END}` +
    `|<[a-z0-9._%+-]*${END}`,
  "u",
);
const BARE_WORD = new RegExp(String.raw`${L}+\.?`, "u");
// Hashes, digests and UUIDs (and their first characters once they are longer than any name):
// held as a local part they never resolve within the look-ahead and would fail closed.
const HASH_LIKE = new RegExp(String.raw`(?=[0-9a-f-]*${D})(?:[0-9a-f]{12,}|[0-9a-f]{8}-[0-9a-f-]*)\.?`, "u");

/** Hex that decodes to printable text may still carry an address or a registered string (hex of
 * "user jane@..."): it stays held. A hash's bytes are not text after a few of them. */
function hexText(word: string): boolean {
  let digits = word.replace(/\.+$/, "");
  digits = digits.slice(0, Math.floor(digits.length / 2) * 2);
  // Python's `bytes.fromhex` refuses anything but hex digits (and white space, which never occurs here).
  if (!/^[0-9a-fA-F]*$/.test(digits)) return false;
  for (let i = 0; i < digits.length; i += 2) {
    const b = Number.parseInt(digits.slice(i, i + 2), 16);
    if (b < 0x20 || b >= 0x7f) return false;
  }
  return true;
}

// (Gaps as wide as `fold` joins: up to eight spaces or tabs.)
const SPACED_HAZARD = new RegExp(`(?<!${NOT_S})(?:[a-z0-9@._+-] {1,8}){1,}[a-z0-9@._+-]? {0,8}${END}`, "u");
const DIGITS_HAZARD = new RegExp(String.raw`(?<![${W_IN}.,])(?:\+|\()?${D}[${D} .()/\n-]{0,24}${END}`, "u");
const IPV6_HAZARD = new RegExp(String.raw`(?<![${W_IN}:.])[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){1,7}${END}`, "u");
// A URL is held while its authority is being written, and from a "user:" on until it ends (a
// password may hold "@", "#", "?" or "/", see `URL_CREDENTIALS_RE`), unless the ":" began a port.
const URL_HAZARD = new RegExp(
  String.raw`(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{1,15}://` +
    String.raw`(?:[^${S_IN}/?#@:]*|[^${S_IN}/?#@:]*:(?!${D}{1,5}[/?#])${NOT_S}*)${END}`,
  "u",
);
const IBAN_HAZARD = new RegExp(String.raw`(?<![a-z0-9])[a-z]{2}${D}{1,2}(?:[ \-]?[a-z0-9]{0,4}){0,8}${END}`, "u");
/** ", springfield, il 6270" */
const ADDRESS_GROWS = new RegExp(String.raw`(?:,?${S}*[a-z0-9-]{0,20}){0,4},?${S}?`, "u");
const ADDRESS_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}.\-/])${D}{1,5}[a-z]?,?${S}+(?:[a-z][a-z'.-]*${S}*){0,4}${END}` +
    String.raw`|(?<![${W_IN}.\-/])(?:${PREFIX_STREETS}|flat|apt\.?|apartment|suite|unit)` +
    String.raw`(?:${S}*[a-z0-9][a-z0-9'-]*,?){0,3}${S}*${END}` +
    String.raw`|(?<![${W_IN}.\-/])(?:[a-z][a-z-]{2,}${S})?[a-z-]*(?:${SUFFIX_STREETS})${S}*${D}{0,4}(?:-${D}{0,3})?${END}` +
    String.raw`|〒[${S_IN}${D}\-]*${END}` +
    // A letter that may begin one of the prefixed street types ("C" of "C/ de", "u" of "ul.").
    String.raw`|(?<![${W_IN}.\-/])(?:c|c/|ul|al|os|avda)${END}`,
  "u",
);
// Where an address is announced ("moved to", "send ... to", "drop ... at", "address:"), a
// capitalized word may be a street whose type comes at its end ("Herengracht", "Kastanjestraat"):
// held until it is written whole, on the raw text (the capital tells a name).
const ADDRESS_CUE_HAZARD = new RegExp(
  `(?:${B}(?:` +
    caseless("moved|move|moving|live|lives|living|send|ship|deliver|post|mail|drop|bring|address|at|to") +
    "))" +
    String.raw`(?:${B}[^.\n]{0,24}?${B}(?:to|at))?[:${S_IN}]+(?:[A-Z][${W_IN}'-]*${S}+)?[A-Z][${W_IN}'-]*${END}`,
  "u",
);
const CUE_WORD = new RegExp(String.raw`[A-Z][${W_IN}'-]*(?:${S}+[A-Z][${W_IN}'-]*)?${END}`, "u");

// Issuer prefixes of the major card networks; a Luhn-valid number outside them is a counter or ID.
export const CARD_PREFIX = /4|5[1-5]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720|3[47]|3(?:0[0-5]|[68])|35|6011|64[4-9]|65|62/u;

/** The Luhn checksum of a string of decimal digits. */
export function luhnOk(digits: string): boolean {
  let total = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) d = d > 4 ? d * 2 - 9 : d * 2;
    total += d;
  }
  return total % 10 === 0;
}

/** python-stdnum's `iban.is_valid(compact, check_country=False)` for the countries of the length
 * table: the BBAN's structure and mod 97 (not national check digits: a mistyped IBAN is personal
 * all the same); the length table keeps the countries whose IBANs we know to be in use. */
function ibanOk(compact: string): boolean {
  const upper = compact.toUpperCase();
  const country = IBAN_COUNTRIES[upper.slice(0, 2)];
  if (country === undefined || country[0] !== [...upper].length) return false;
  if (!mod97Ok(upper.slice(4) + upper.slice(0, 4))) return false;
  return new RegExp(country[1], "u").test(upper.slice(4));
}

/** stdnum's `mod_97_10.validate`: letters count as 10..35, the number mod 97 is 1. */
function mod97Ok(text: string): boolean {
  let rest = 0;
  for (const ch of text) {
    const value = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ".indexOf(ch);
    if (value < 0) return false;
    for (const digit of String(value)) rest = (rest * 10 + digit.charCodeAt(0) - 48) % 97;
  }
  return rest === 1;
}

/** The length of the valid IBAN `raw` starts with (0 if none): the pattern may run on into a
 * following word ("es13 6428 ... 4064 before" ends with "befo" + "re"). */
export function ibanLength(raw: string): number {
  const parts = raw.split(/([ -])/u);
  for (let j = parts.length; j > 0; j -= 2) {
    const head = parts.slice(0, j).join("");
    if (ibanOk(head.replace(/[ -]/gu, ""))) return head.length;
  }
  return 0;
}

function cardOk(raw: string): boolean {
  const groups = raw.split(/[ ]*\n[ ]*|[ -]/u);
  const digits = groups.join("");
  const n = [...digits].length;
  if (n < 13 || n > 19 || matchAt(CARD_PREFIX, digits) === null || !luhnOk(digits)) return false;
  if (groups.length === 1) return true;
  // Typed or printed card numbers come in groups (4-4-4-4, Amex 4-6-5), possibly broken across
  // a line; "1 2 3 4 ..." or mixed spaces and hyphens are tables of numbers, not a card.
  if (raw.includes(" ") && raw.includes("-")) return false;
  return groups.slice(0, -1).every((g) => [...g].length >= 3);
}

function phoneOk(raw: string, lo: number, hi: number): boolean {
  const digits = [...raw].filter((c) => /\p{Nd}/u.test(c));
  const count = (c: string): number => raw.split(c).length - 1;
  if (digits.length < lo || digits.length > hi || count("(") !== count(")")) return false;
  // All zeros after the trunk or country code is padding ("0000 0000 0000"), not a line.
  return digits.slice(1).some((c) => c !== "0") && new Set(raw.match(/[./]/gu) ?? []).size <= 1;
}

function emailOk(m: RegExpExecArray): boolean {
  const { tld, at, local, domain } = m.groups as Record<"tld" | "at" | "local" | "domain", string>;
  if (NOT_TLDS.has(tld)) return false;
  // "see @pytest.mark.parametrize": a spaced "@" before a dotted name is a decorator or a
  // mention unless the name ends in a real top-level domain.
  if (at.trim() === "@" && at !== "@" && !WORD_TLDS.has(tld) && [...tld].length !== 2) return false;
  if (fullMatch(PLAIN_AT, at) !== null || /[[({<%&]/u.test(at)) return true;
  // " at ": "look at github.com" is prose. Written-out addresses spell out a dot somewhere, or
  // have an address-like local part ("jane.doe", "jdoe42", "j_doe"), and end in a real TLD.
  if (!WORD_TLDS.has(tld) && [...tld].length !== 2) return false;
  return WORD_DOT.test(domain) || WORD_DOT.test(local) || new RegExp(`[._+${D}]`, "u").test(local);
}

// "git@github.com:owner/repo.git" (scp-like remote) and "ssh://git@host/..." log in to a host; they
// are not addresses. Only service accounts: "ssh://jane.doe@host" still names a person.
const REMOTE_AFTER = new RegExp(String.raw`:[${W_IN}~.-]*(?:/|${END})|:[${W_IN}.-]+\.git${B}`, "u");
// What may follow "git@host" at the end of a text: a remote's path being written.
const REMOTE_TAIL = new RegExp(`:[${W_IN}~.-]*`, "u");
const SERVICE_USERS = words("git hg svn ssh gitlab gitea forgejo bitbucket aur cvs");

function isRemote(text: string, m: RegExpExecArray): boolean {
  if (matchAt(REMOTE_AFTER, text, m.index + m[0].length) !== null) return true;
  return SERVICE_USERS.has(m.groups!.local!) && text.slice(Math.max(0, m.index - 3), m.index) === "://";
}

const TOWN = new RegExp(
  String.raw`,[ \t]*(?!(?:The|This|That|In|On|At|And|But|If|As|So|Then|Which|When|See)${B})[A-Z][a-z]+(?:[ -][A-Z][a-z]+)?` +
    String.raw`(?:,?[ \t]*(?:[A-Z]{2}[ \t]+${D}{5}(?:-${D}{4})?|[A-Z]{1,2}${D}[A-Z${D}]?[ \t]?${D}[A-Z]{2}|${D}{4,5}))?(?!${W})`,
  "u",
);

function townEnd(text: string, end: number): number {
  const m = matchAt(TOWN, text, end);
  return m !== null ? m.index + m[0].length : end;
}

function addressOk(m: RegExpExecArray): boolean {
  const found = m.groups?.words;
  return found === undefined || !splitWords(found).some((w) => FUNCTION_WORDS.has(w));
}

/** The IPv4 address found is no loopback, broadcast or version number. */
function ipv4Ok(text: string, m: RegExpExecArray): boolean {
  const quad = m[0];
  const octets = quad.split(".").map((x) => Number.parseInt(x, 10));
  if (octets.every((o) => o < 10)) return false;
  if (octets[0] === 127 || quad === "0.0.0.0" || quad === "255.255.255.255") return false;
  return !VERSION_CONTEXT.test(lastChars(text.slice(0, m.index), 12));
}

/** The IPv6 address found parses (Python's `ipaddress.IPv6Address`), has a decimal digit and is
 * neither loopback nor unspecified. */
function ipv6Ok(raw: string): boolean {
  const addrText = raw.split("%", 1)[0]!;
  if (!/[0-9]/u.test(addrText) || (!addrText.includes("::") && addrText.split(":").length - 1 !== 7)) return false;
  const hextets = ipv6Hextets(addrText);
  if (hextets === null) return false;
  const zeroHead = hextets.slice(0, 7).every((h) => h === 0);
  return !(zeroHead && (hextets[7] === 1 || hextets[7] === 0));
}

/** Python's `IPv6Address._ip_int_from_string` on the pattern's characters (hex digits and ":"),
 * as eight hextets, or null where Python raises. */
function ipv6Hextets(ip: string): number[] | null {
  const HEXTETS = 8;
  const parts = ip.split(":");
  if (parts.length < 3 || parts.length > HEXTETS + 1) return null;
  let skip: number | null = null;
  for (let i = 1; i < parts.length - 1; i++) {
    if (parts[i] === "") {
      if (skip !== null) return null; // at most one "::"
      skip = i;
    }
  }
  let hi: number;
  let lo: number;
  if (skip !== null) {
    hi = skip;
    lo = parts.length - skip - 1;
    if (parts[0] === "" && --hi !== 0) return null;
    if (parts[parts.length - 1] === "" && --lo !== 0) return null;
    if (HEXTETS - (hi + lo) < 1) return null;
  } else {
    if (parts.length !== HEXTETS || parts[0] === "" || parts[parts.length - 1] === "") return null;
    hi = parts.length;
    lo = 0;
  }
  const parse = (h: string): number | null => (/^[0-9a-fA-F]{1,4}$/u.test(h) ? Number.parseInt(h, 16) : null);
  const out: number[] = [];
  for (const h of [...parts.slice(0, hi)]) {
    const v = parse(h);
    if (v === null) return null;
    out.push(v);
  }
  const tail: number[] = [];
  for (const h of lo > 0 ? parts.slice(-lo) : []) {
    const v = parse(h);
    if (v === null) return null;
    tail.push(v);
  }
  return [...out, ...new Array<number>(HEXTETS - out.length - tail.length).fill(0), ...tail];
}

const PII_KINDS: readonly string[] = [EMAIL, PHONE, CARD, IP, URL_CREDENTIALS, IBAN, ADDRESS];

export interface PiiOptions {
  /** The kinds to look for (default: all of `PiiDetector.KINDS`). */
  kinds?: Iterable<string>;
  /** Hold a bare word at the end of a text as a possible address's local part (default true);
   * off where nothing more will be written. */
  holdLocalParts?: boolean;
}

/**
 * Personal-data patterns with validators that keep version numbers, dates and hashes out.
 *
 * Decisions on tricky inputs (tests/privacy/test_detectors.py):
 * - emails need a dotted domain with an alphabetic TLD of 2+ letters: `HEAD@{1}`, `a@b.c`,
 *   `user@localhost` are not emails; `git@github.com` and Message-IDs are. Build artifacts
 *   (`icon@2x.png`) are not. Written-out addresses ("jane dot doe at example dot com", "[at]",
 *   " @ ", "%40") are; "look at github.com" is not.
 * - phones need a `+`/`00` country code, the 3-3-4 North American shape, a national trunk `0` and
 *   9-12 digits in groups of 2+, or the 3-2-2-2 Spanish mobile; dates, times, versions never match.
 * - cards need 13-19 digits, a known issuer prefix, Luhn and groups of 3+ digits.
 * - IBANs need the country's registered length and the mod-97 check.
 * - street addresses need a house number and a street type; "after 5 minutes the drive" is prose.
 * - IPv4 excludes loopback/unspecified/broadcast, all-single-digit quads and numbers after "git",
 *   "version", "v", "section"; IPv6 must parse, hold a decimal digit and not be loopback.
 * - URL credentials: `scheme://user:password@host` (the password as pasted, up to the last "@" a
 *   host follows) or a token-like user of 20+ characters.
 */
export class PiiDetector implements Detector {
  static readonly KINDS = PII_KINDS;
  readonly kinds: ReadonlySet<string>;
  readonly holdLocalParts: boolean;

  constructor(options: PiiOptions = {}) {
    const chosen = [...(options.kinds ?? PII_KINDS)];
    const unknown = [...new Set(chosen.filter((k) => !PII_KINDS.includes(k)))].sort();
    if (unknown.length > 0) throw new RangeError(`unknown personal-data kind(s): ${unknown.join(", ")}`);
    this.kinds = new Set(chosen);
    this.holdLocalParts = options.holdLocalParts ?? true;
  }

  find(text: string): Span[] {
    const f = fold(text);
    const t = f.text;
    const out: [number, number, string][] = [];
    const k = this.kinds;
    const all = (re: RegExp): RegExpExecArray[] => [...t.matchAll(re)] as RegExpExecArray[];
    const add = (ms: RegExpExecArray[], kind: string): void => {
      for (const m of ms) out.push([m.index, m.index + m[0].length, kind]);
    };
    if (k.has(EMAIL)) add(all(EMAIL_RE).filter((m) => emailOk(m) && !isRemote(t, m)), EMAIL);
    if (k.has(URL_CREDENTIALS)) add(all(URL_CREDENTIALS_RE), URL_CREDENTIALS);
    if (k.has(PHONE)) {
      add(all(PHONE_INTL_RE).filter((m) => phoneOk(m[0], 8, 15)), PHONE);
      add(all(PHONE_NANP_RE), PHONE);
      add(all(PHONE_NATIONAL_RE).filter((m) => phoneOk(m[0], 9, 12)), PHONE);
      add(all(PHONE_GROUPED_RE), PHONE);
    }
    if (k.has(CARD)) add(all(CARD_RE).filter((m) => cardOk(m[0])), CARD);
    if (k.has(IP)) {
      add(all(IPV4_RE).filter((m) => ipv4Ok(t, m)), IP);
      add(all(IPV6_RE).filter((m) => ipv6Ok(m[0])), IP);
    }
    if (k.has(IBAN)) {
      for (const m of all(IBAN_RE)) {
        const n = ibanLength(m[0]);
        if (n > 0) out.push([m.index, m.index + n, IBAN]);
      }
    }
    if (k.has(ADDRESS)) for (const re of ADDRESS_PATTERNS) add(all(re).filter(addressOk), ADDRESS);
    const spans = out.filter(([a, b]) => b > a).map(([a, b, kind]) => new Span(...f.span(a, b), kind));
    // The town after a street ("12 Larch Lane, Springfield"), written with a capital on the raw text.
    // "+1 (415) 555-0132" is also a North American "(415) 555-0132": one finding, not two.
    return mergeSpans(spans.map((s) => (s.kind === ADDRESS ? new Span(s.start, townEnd(text, s.end), s.kind) : s)));
  }

  hazard(text: string): Span | null {
    const offset = tailStart(text, HAZARD_TAIL);
    const f = fold(text.slice(offset));
    const tail = f.text;
    const found: Span[] = [];
    const k = this.kinds;
    const add = (m: RegExpExecArray | null, kind: string): void => {
      if (m !== null) found.push(new Span(offset + f.rawStart(m.index), text.length, kind));
    };

    if (k.has(EMAIL)) {
      let m = EMAIL_HAZARD.exec(tail);
      // Without local-part holds, a bare word ("loop", "patch.") is not held; "jane.doe",
      // "jane dot d" or anything with its "@" already written still is.
      const bare = m !== null && fullMatch(BARE_WORD, m[0]) !== null;
      if (
        m !== null &&
        bare &&
        (!this.holdLocalParts || (fullMatch(HASH_LIKE, m[0]) !== null && !hexText(m[0])))
      ) {
        m = null;
      }
      // "actions/checkout@8e5e7e5a...", "pkg@3f9a...": a commit or digest after the "@" is a
      // ref, not a domain being written (a domain has a dot and no 12+ hex run for a name);
      // held, it would never resolve within the look-ahead and fail closed.
      if (m !== null && m[0].includes("@")) {
        const domain = m[0].slice(m[0].lastIndexOf("@") + 1);
        if (fullMatch(HASH_LIKE, domain) !== null && !hexText(domain)) m = null;
      }
      add(m, EMAIL);
      // "git@host:" at the end may still be a remote's path or an address followed by a colon.
      for (const e of tail.matchAll(EMAIL_RE) as IterableIterator<RegExpExecArray>) {
        if (emailOk(e) && fullMatchIn(REMOTE_TAIL, tail, e.index + e[0].length) !== null) add(e, EMAIL);
      }
      // Letters spaced out one by one may still become an address ("j o h" of "j o h n @ ...").
      add(SPACED_HAZARD.exec(tail), EMAIL);
    }
    if (k.has(URL_CREDENTIALS)) add(URL_HAZARD.exec(tail), URL_CREDENTIALS);
    if (k.has(PHONE) || k.has(CARD) || k.has(IP)) {
      const m = DIGITS_HAZARD.exec(tail);
      // Three digits can still become a phone, card or address; "+" or "(" announce a phone.
      if (m !== null && ((m[0].match(/\p{Nd}/gu) ?? []).length >= 3 || "+(".includes(m[0][0]!))) {
        add(m, k.has(PHONE) ? PHONE : k.has(CARD) ? CARD : IP);
      }
    }
    if (k.has(IP)) {
      const m = IPV6_HAZARD.exec(tail);
      add(m !== null && /\p{Nd}/u.test(m[0]) ? m : null, IP);
    }
    if (k.has(IBAN)) add(IBAN_HAZARD.exec(tail), IBAN);
    if (k.has(ADDRESS)) {
      const m = ADDRESS_HAZARD.exec(tail);
      add(m !== null && !splitWords(m[0]).slice(1).some((w) => FUNCTION_WORDS.has(w)) ? m : null, ADDRESS);
      if (this.holdLocalParts) {
        // Not at the end of a text: a word written whole stays a word.
        const cue = ADDRESS_CUE_HAZARD.exec(lastChars(text, 64));
        if (cue !== null) {
          const word = CUE_WORD.exec(cue[0]);
          if (word !== null) found.push(new Span(text.length - cue[0].length + word.index, text.length, ADDRESS));
        }
      }
      // A complete street may still take its postcode and city (", 75002 Paris").
      for (const re of ADDRESS_PATTERNS.slice(0, 4)) {
        for (const a of tail.matchAll(re) as IterableIterator<RegExpExecArray>) {
          if (addressOk(a) && fullMatchIn(ADDRESS_GROWS, tail, a.index + a[0].length) !== null) add(a, ADDRESS);
        }
      }
    }
    return found.length > 0 ? found.reduce((a, b) => (compareSpans(b, a) < 0 ? b : a)) : null;
  }

  forPrompt(): Detector {
    return this;
  }
}
