/**
 * Identifiers with a shape of their own: port of privacy/recognizers.py's `ShapeRecognizer`.
 *
 * Vendor tokens detect-secrets has no plugin for, TOTP seeds, cryptocurrency addresses (a payment
 * identity: it links every transaction of its owner), MAC addresses, coordinates, defanged IPv4
 * addresses, ten-digit North American numbers and phone links, P.O. boxes, streets written before
 * their number, dotted IBANs, and national identifiers whose format and checksum are specific
 * enough without their name. Matched on the raw text, as the Python does.
 */

import { ibanLength } from "./pii.js";
import { B, D, NOT_S, S_IN, W, W_IN, matchAt } from "./pyre.js";
import { caseless, searchIn, tailStart } from "./pystr.js";
import { ADDRESS, IBAN, IP, NATIONAL_ID, PHONE, SECRET, type Detector, Span, compareSpans, mergeSpans } from "./spans.js";
import { stdnumValid } from "./stdnum_checks.js";

/** `text` with every decimal digit of another script as its ASCII digit (Python's `int()` and
 * `float()` read them). Decimal digits come in runs of ten from 0 (Unicode's rule). */
function asciiDigits(text: string): string {
  return text.replace(/\p{Nd}/gu, (d) => {
    const cp = d.codePointAt(0)!;
    let zero = cp;
    while (/\p{Nd}/u.test(String.fromCodePoint(zero - 1))) zero--;
    return String((cp - zero) % 10);
  });
}

/** Python's `text[max(0, i - n):i]`: the `n` code points before UTF-16 index `i`. */
function before(text: string, i: number, n: number): string {
  const head = text.slice(0, i);
  return head.slice(tailStart(head, n));
}

// Vendor tokens detect-secrets 1.5.0 has no plugin for, and cryptocurrency addresses.
const SHAPED_SECRETS = new RegExp(
  String.raw`(?<![A-Za-z0-9_\-])(?:hf_[A-Za-z]{30,40}|key-[0-9a-f]{32}|shp(?:at|ss|ca|pa)_[0-9a-fA-F]{32}` +
    String.raw`|otpauth://[th]otp/[^${S_IN}?]*\?${NOT_S}*|0x[0-9a-fA-F]{40}|bc1[ac-hj-np-z02-9]{38,62}|tb1[ac-hj-np-z02-9]{38,62}` +
    String.raw`|[13][1-9A-HJ-NP-Za-km-z]{25,34})(?![A-Za-z0-9_\-])`,
  "gu",
);
// A TOTP seed: base32 after "secret=" (an otpauth URI's parameter, or pasted alone) or after an
// authenticator keyword, also in groups of four as authenticator apps show it; the base32 is upper
// case even where the keyword is not (Python's `(?-i:...)`: here the keywords are spelled caseless).
const BASE32 = String.raw`[A-Z2-7]{4}(?:[ ]?[A-Z2-7]{4}){3,15}=*`;
const TOTP_KEYWORD =
  caseless("(?:totp|otp|2fa|mfa|authenticator|two[- ]factor)") +
  String.raw`[${W_IN} -]{0,20}?` +
  caseless("(?:secret|seed|key|code)?") +
  String.raw`[ \t]*` +
  caseless("(?:[:=]|is|was)?") +
  String.raw`[ \t]*`;
const TOTP = new RegExp(`(?:${caseless("secret=")}|${TOTP_KEYWORD})(?<value>${BASE32})(?![A-Za-z0-9])`, "gud");

/** A legacy Bitcoin address carries its double-SHA-256 checksum in base58. */
function shapedSecretOk(word: string): boolean {
  return word[0] === "1" || word[0] === "3" ? stdnumValid("bitcoin", word) : true;
}

// A MAC address: six pairs with one separator throughout, or three dotted quads (Cisco).
const MAC = new RegExp(
  String.raw`(?<![${W_IN}:.\-])(?:[0-9a-f]{2}(?<sep>[:\-])[0-9a-f]{2}(?:\k<sep>[0-9a-f]{2}){4}|[0-9a-f]{4}\.[0-9a-f]{4}\.[0-9a-f]{4})` +
    String.raw`(?![${W_IN}:\-]|\.${W})`,
  "giu",
);
const MAC_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}:.\-])[0-9a-f]{2}(?<sep>[:\-])(?:[0-9a-f]{1,2}(?:\k<sep>|$)){0,5}$`,
  "iu",
);
// An IPv4 address written defanged, as threat reports and people hiding it from filters do.
const DEFANG_DOT =
  String.raw`(?:[ \t]*(?:\[\.\]|\(\.\)|\{\.\}|\[dot\]|\(dot\)|\{dot\}|<dot>)[ \t]*|[ \t]+dot[ \t]+|[ \t]+\.[ \t]+` +
  String.raw`|[ \t]*\[[ \t]*\.[ \t]*\][ \t]*)`;
const DEFANGED_IPV4 = new RegExp(
  String.raw`(?<![${W_IN}.])(?<a>${D}{1,3})${DEFANG_DOT}(?<b>${D}{1,3})(?:${DEFANG_DOT}|\.)(?<c>${D}{1,3})(?:${DEFANG_DOT}|\.)` +
    String.raw`(?<d>${D}{1,3})(?!${W}|\.${D})`,
  "giu",
);
const DEFANG_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}.])${D}{1,3}(?:(?:[ \t]*[\[({<](?:\.|d(?:o(?:t)?)?)?[\])}>]?|[ \t]+(?:d(?:o(?:t)?)?|\.)?)[ \t]*${D}{0,3}` +
    String.raw`|\.${D}{0,3}){1,6}$`,
  "iu",
);
// Coordinates: decimal degrees with a degree sign or hemisphere letters, or after a location
// keyword; degrees-minutes-seconds. A pair of decimals alone is a measurement.
const DEG = String.raw`[ \t]*(?:°|º|deg${B})?[ \t]*`;
const COORD_PAIR =
  String.raw`(?<lat>[+-]?${D}{1,2}\.${D}{2,})${DEG}(?<ns>[ns](?![a-z]))?[ \t]*[,;/ ][ \t]*` +
  String.raw`(?<lon>[+-]?${D}{1,3}\.${D}{2,})${DEG}(?<ew>[ew](?![a-z]))?`;
const COORDS = new RegExp(String.raw`(?<![${W_IN}.])(?:${COORD_PAIR})(?!${W}|\.${D})`, "giu");
const COORD_KEYWORD = new RegExp(
  String.raw`(?:gps|coords?|coordinates|co-ordinates|lat(?:itude)?(?:[ /,]*lon(?:g(?:itude)?)?)?|location|position|geo` +
    String.raw`|located|home|house|live|lives|address|pin(?:ned)?|maps?|here|spot|meet|near|parked|camp|pickup|at)${B}[^.\n]{0,20}$`,
  "iu",
);
const DMS_PART = String.raw`${D}{1,3}[ \t]*°[ \t]*${D}{1,2}[ \t]*['′][ \t]*(?:${D}{1,2}(?:\.${D}+)?[ \t]*(?:"|″|'')?)?[ \t]*[nsew]`;
const DMS = new RegExp(String.raw`(?<![${W_IN}.])${DMS_PART}(?:[ \t]*,?[ \t]*${DMS_PART})?`, "giu");
// A list's first number ("1." at a line's start or after a colon) may open a numbered seed phrase.
const NUMBERING_HAZARD = /(?:^|(?<=[\n:]))[ \t]*1[.)]?[ \t]*$/u;
// Degrees, minutes and seconds while written: from the degree sign on ("11°03'49.9"S 167°0").
const DMS_HAZARD = new RegExp(String.raw`(?<![${W_IN}.])${D}{1,3}[ \t]*°[\p{Nd} \t'′".″,°nsew]{0,30}$`, "iu");
// Every part may be the last one written so far: "26.1214°", "26.1214° S,", "26.1214° S, 52.8".
const COORD_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}.])[+-]?${D}{1,3}\.${D}*(?:[ \t]*(?:°|º)?(?:[ \t]*[nsew](?![a-z]))?(?:[ \t]*[,;/ ][ \t]*[+-]?${D}{0,3}(?:\.${D}*)?` +
    String.raw`(?:[ \t]*(?:°|º)?(?:[ \t]*[nsew](?![a-z]))?)?)?)?[ \t]*$`,
  "iu",
);

function coordsOk(text: string, m: RegExpExecArray | RegExpMatchArray): boolean {
  const g = m.groups!;
  const lat = Number(asciiDigits(g["lat"]!));
  const lon = Number(asciiDigits(g["lon"]!));
  if (Math.abs(lat) > 90 || Math.abs(lon) > 180) return false;
  const s = m[0];
  const marked =
    s.includes("°") || s.includes("º") || g["ns"] !== undefined || g["ew"] !== undefined || s.toLowerCase().includes("deg");
  return marked || COORD_KEYWORD.test(before(text, m.index!, 60));
}

// Phone numbers the national patterns leave out: ten North American digits in one run, a wa.me
// link's number, a tel: link without "+".
const NANP_RUN = new RegExp(
  String.raw`(?<![${W_IN}.+\-/])(?:\+?1)?(?<n>[2-9]${D}{2}[2-9]${D}{6})(?![${W_IN}\-/]|[.,]${D})`,
  "gu",
);
const PHONE_LINKS = new RegExp(
  String.raw`(?:wa\.me/|whatsapp\.com/send\?phone=|tel:|callto:|sms:|viber://chat\?number=)\+?(?<n>${D}{6,15})${B}`,
  "giu",
);
const PHONE_LINK_HAZARD = new RegExp(String.raw`(?:wa\.me/|tel:|callto:|sms:|phone=|number=)\+?${D}*$`, "iu");
const NANP_CONTEXT_NOT =
  /(?:id|#|no\.?|number|order|ticket|issue|pr|commit|build|run|job|ts|timestamp|epoch|size|bytes)[ \t:=#]*$/iu;

function nanpOk(text: string, m: RegExpExecArray | RegExpMatchArray): boolean {
  const n = [...m.groups!["n"]!];
  const at = (a: number, b: number): string => n.slice(a, b).join("");
  // N11 area codes and exchanges are service codes; 555-01xx numbers are fiction's.
  if (at(1, 3) === "11" || at(4, 6) === "11" || new Set(n).size < 4) return false;
  const ctx = before(text, m.index!, 16);
  if (NANP_CONTEXT_NOT.test(ctx) && !/phone|cell|call|tel|mobile|text|sms|fax/iu.test(ctx)) return false;
  // The numbering plan's rules, not libphonenumber's list of assigned area codes: an area code
  // opened next year, or one the list lags behind, is still a number someone wrote.
  return n[1] !== "9" && !(at(3, 6) === "555" && at(6, 8) === "01");
}

/** A wa.me or tel: link holds nothing but a phone number: its length is the only check. */
function linkPhoneOk(n: string): boolean {
  const length = [...n].length;
  return 7 <= length && length <= 15;
}

// Postal addresses the street patterns miss: a P.O. box, a street name before its number
// ("Quayside Street 196, Unit 8B").
const PO_BOX = new RegExp(
  String.raw`(?<!${W})(?:p\.?[ \t]?o\.?[ \t]?box|post(?:al)?[ \t]+office[ \t]+box|postfach|apartado(?:[ \t]+de[ \t]+correos)?` +
    String.raw`|bo[iî]te[ \t]+postale|casella[ \t]+postale|private[ \t]+bag|gpo[ \t]+box|locked[ \t]+bag)` +
    String.raw`[ \t]*(?:no\.?|#)?[ \t]*${D}{1,7}${B}` +
    String.raw`(?:,[ \t]*[A-Z][${W_IN}'-]+(?:[ \t]+[A-Z][${W_IN}'-]+)?)?(?:,?[ \t]*[A-Z]{2}[ \t]+${D}{5}(?:-${D}{4})?)?`,
  "giu",
);
const PO_BOX_HAZARD = new RegExp(
  String.raw`(?<!${W})(?:p\.(?:[ \t]?o\.?(?:[ \t]?b(?:o(?:x)?)?)?)?|po[ \t]?b(?:o(?:x)?)?|postfach)` +
    String.raw`(?:[ \t]*(?:no\.?|#)?[ \t]*${D}*)?$`,
  "iu",
);
const STREET_WORDS =
  String.raw`Street|St\.|Avenue|Ave\.?|Road|Rd\.?|Boulevard|Blvd\.?|Lane|Drive|Court|Place|Terrace|Way|Square|Parkway` +
  String.raw`|Highway|Crescent|Close|Circle|Trail|Row|Gardens|Grove|Mews|Alley|Plaza|Quay|Wharf|Walk|Hill|Rise|Green`;
const STREET_NUMBER = new RegExp(
  String.raw`(?<!${W})(?:[A-Z][a-z'-]+[ \t]+){1,3}(?:${STREET_WORDS})[ \t]+${D}{1,5}[a-zA-Z]?(?![${W_IN}.]|\.${D})` +
    String.raw`(?:,?[ \t]*${caseless(String.raw`(?:unit|apt\.?|apartment|flat|suite|ste\.?|floor|fl\.?|#)`)}[ \t]*${W}{1,5})?` +
    String.raw`(?:,[ \t]*[A-Z][${W_IN}'-]+(?:[ \t]+[A-Z][${W_IN}'-]+)?)?`,
  "gu",
);
// A street's name is held once a street word follows it, and from its first letter where a phrase
// announces an address ("I live at Q..."): its first words would go up before the number.
const STREET_NUMBER_HAZARD = new RegExp(
  String.raw`(?<!${W})[A-Z][a-z'-]+[ \t]+(?:${STREET_WORDS})(?:[ \t]+${D}{0,5}[a-zA-Z]?)?[ \t]*$` +
    String.raw`|(?<=${caseless("(?:live|ives|ving|oved|ress|ated|ying|stay)")} ${caseless("(?:at|on|to|is)")} )(?:[A-Z][a-z'-]*[ \t]*){1,3}$` +
    String.raw`|(?<=${caseless("address")}: )(?:[A-Z][a-z'-]*[ \t]*){1,3}$`,
  "u",
);
// "Wall Street 2", "Main Street 10 minutes": a street's name that is a famous place or prose.
const STREET_NOT = new RegExp(
  String.raw`(?:Wall|Easy|Sesame|Main|Fleet|Downing)[ \t]+Street[ \t]+${D}{1,5}[ \t]+(?:minutes|years|times)`,
  "iu",
);
// An IBAN written with dots between its groups (the space and hyphen forms are `PiiDetector`'s).
const IBAN_DOTTED = new RegExp(
  String.raw`(?<![${W_IN}.])[a-z]{2}${D}{2}(?:\.[a-z0-9]{4}){2,7}(?:\.[a-z0-9]{1,3})?(?!${W}|\.${W})`,
  "giu",
);
const IBAN_DOTTED_HAZARD = new RegExp(String.raw`(?<![${W_IN}.])[a-z]{2}${D}{2}(?:\.[a-z0-9]{0,4}){1,8}$`, "iu");

// Identifiers specific enough by shape and checksum: a CPF written with its dots and dash, an
// Aadhaar in its three groups of four (Verhoeff), a PAN (its fourth letter is the holder's type),
// a codice fiscale (16 characters, check letter), a Steuer-ID in its 2-3-3-3 groups, a birth date,
// a separator and a check digit (Swedish personnummer, Danish CPR, Finnish HETU, Korean RRN), a
// Belgian national number as it is printed ("85.07.30-033.28").
const SHAPED_IDS: readonly (readonly [RegExp, string])[] = [
  [new RegExp(String.raw`(?<![${W_IN}.\-])${D}{3}\.${D}{3}\.${D}{3}-${D}{2}(?![${W_IN}\-]|\.${D})`, "gu"), "br.cpf"],
  [
    new RegExp(String.raw`(?<![${W_IN}.\-])[2-9]${D}{3}[ -]${D}{4}[ -]${D}{4}(?![${W_IN}\-]|[.,]${D}|[ -]${D})`, "gu"),
    "in_.aadhaar",
  ],
  [new RegExp(String.raw`(?<!${W})[A-Z]{3}[PCHFATBLJG][A-Z]${D}{4}[A-Z](?!${W})`, "gu"), "in_.pan"],
  [
    new RegExp(
      String.raw`(?<!${W})[A-Z]{6}[0-9LMNPQRSTUV]{2}[ABCDEHLMPRST][0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{3}[A-Z](?!${W})`,
      "giu",
    ),
    "it.codicefiscale",
  ],
  [new RegExp(String.raw`(?<![${W_IN}.\-])${D}{2} ${D}{3} ${D}{3} ${D}{3}(?![${W_IN}\-]|[.,]${D}| ${D})`, "gu"), "de.idnr"],
  [
    new RegExp(String.raw`(?<![${W_IN}.\-+])(?:19|20)?${D}{6}[-+]${D}{4}(?![${W_IN}\-]|[.,]${D})`, "gu"),
    "se.personnummer",
  ],
  [new RegExp(String.raw`(?<![${W_IN}.\-+])${D}{6}-${D}{4}(?![${W_IN}\-]|[.,]${D})`, "gu"), "dk.cpr"],
  [new RegExp(String.raw`(?<![${W_IN}.\-+])${D}{6}[-+A-FU-Y]${D}{3}[0-9A-Y](?![${W_IN}\-])`, "giu"), "fi.hetu"],
  [new RegExp(String.raw`(?<![${W_IN}.\-+])${D}{6}-${D}{7}(?![${W_IN}\-]|[.,]${D})`, "gu"), "kr.rrn"],
  [
    new RegExp(String.raw`(?<![${W_IN}.\-+])${D}{2}\.${D}{2}\.${D}{2}-${D}{3}\.${D}{2}(?![${W_IN}\-]|[.,]${D})`, "gu"),
    "be.nn",
  ],
];
// A TOTP seed while written: base32 in up to sixteen groups of 1-4 at the very end. The Python's
// `(?P<value>[A-Z2-7]{1,4}(?: ?[A-Z2-7]{1,4}){0,15})\Z` tries every way to split a run of base32
// before it gives up: minutes on "2FA: <40 base32 letters> ok". `totpHazard` finds the same value
// start without the splitting (see there).
const BASE32_CHAR = /[A-Z2-7]/;
const totpHazardPatterns = new Map<number, RegExp>();

/**
 * Where the TOTP hazard's value starts in `tail`, or null: the Python pattern's answer.
 *
 * A value is a suffix of the text that splits into at most 16 groups (a word of n base32
 * characters takes ceil(n/4) of them), so the suffixes that qualify are exactly those starting at
 * a base32 character at or after `v0`, the smallest such start. A pattern whose value is "a base32
 * character, then at most `tail.length - v0 - 1` base32 characters or spaces to the end" accepts
 * the same value starts, one way each, and the keyword part before it backtracks as the Python's
 * does: the first match is the Python's.
 */
function totpHazard(tail: string): number | null {
  let v0 = -1;
  let groups = 0;
  let word = 0;
  for (let i = tail.length; i > 0; i--) {
    const c = tail[i - 1]!;
    if (BASE32_CHAR.test(c)) {
      word++;
      if (groups + Math.ceil(word / 4) > 16) break;
      v0 = i - 1;
    } else if (c === " " && word > 0 && i >= 2 && BASE32_CHAR.test(tail[i - 2]!)) {
      groups += Math.ceil(word / 4);
      word = 0;
    } else {
      break;
    }
  }
  if (v0 < 0) return null;
  const n = tail.length - v0 - 1;
  let pattern = totpHazardPatterns.get(n);
  if (pattern === undefined) {
    pattern = new RegExp(`${TOTP_KEYWORD}(?<value>[A-Z2-7][A-Z2-7 ]{0,${n}})$`, "ud");
    totpHazardPatterns.set(n, pattern);
  }
  return pattern.exec(tail)?.indices?.groups?.["value"]?.[0] ?? null;
}
// Webhook URLs carry their secret in the path: the URL is held from its scheme while its host may
// still become one of these.
const WEBHOOK_HOSTS = ["hooks.slack.com/", "discord.com/api/webhooks/", "discordapp.com/api/webhooks/", "outlook.office.com/webhook"];
const WEBHOOK = new RegExp(
  String.raw`https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/[${W_IN}/\-]+|discord(?:app)?\.com/api/webhooks/[${W_IN}/\-]+)`,
  "gu",
);

function webhookHazard(tail: string): number | null {
  const m = new RegExp(`https?://(${NOT_S}*)$`, "u").exec(tail);
  if (m === null) return null;
  const rest = m[1]!;
  return WEBHOOK_HOSTS.some((h) => h.startsWith(rest) || rest.startsWith(h)) ? m.index : null;
}

const SHAPED_SECRET_HAZARD = new RegExp(
  String.raw`(?<![A-Za-z0-9_\-])(?:hf_[A-Za-z]*|key-[0-9a-f]*|shp(?:at|ss|ca|pa)_[0-9a-fA-F]*|otpauth:${NOT_S}*|0x[0-9a-fA-F]{8,}` +
    String.raw`|bc1[ac-hj-np-z02-9]*|secret=[A-Za-z2-7]*)$`,
  "u",
);
// After a location keyword even a number's first digits may start a coordinate ("GPS 26").
const TRAILING_NUMBER = new RegExp(String.raw`(?<![${W_IN}.])[+-]?${D}{1,3}$`, "u");

function macOk(mac: string): boolean {
  const digits = mac.toLowerCase().replace(/[^0-9a-f]/gu, "");
  // All zeros and broadcast are placeholders; a MAC has some variety (a hex dump row does not look like one).
  if (digits === "000000000000" || digits === "ffffffffffff" || new Set(digits).size <= 2) return false;
  // Documentation's examples: every pair a doubled digit ("aa:bb:cc:dd:ee:ff"), the hex digits
  // counting up or down ("01:23:45:67:89:ab"), and the range IANA reserves for documentation
  // (00:00:5e:00:53:xx, RFC 7042). A vendor's address is none of these by chance.
  const doubled = [0, 2, 4, 6, 8, 10].every((i) => digits[i] === digits[i + 1]);
  const steps = new Set<number>();
  for (let i = 1; i < digits.length; i++) steps.add(parseInt(digits[i]!, 16) - parseInt(digits[i - 1]!, 16));
  const counting = steps.size === 1 && (steps.has(1) || steps.has(-1));
  return !(doubled || counting || digits.startsWith("00005e0053"));
}

function ibanDottedOk(raw: string): boolean {
  return ibanLength(raw.replaceAll(".", " ")) === raw.length;
}

/** Identifiers with a shape of their own that the pattern detectors did not know (see the module comment). */
export class ShapeRecognizer implements Detector {
  find(text: string): Span[] {
    const out: Span[] = [];
    const add = (m: RegExpMatchArray, kind: string): void => {
      out.push(new Span(m.index!, m.index! + m[0].length, kind));
    };
    for (const m of text.matchAll(SHAPED_SECRETS)) if (shapedSecretOk(m[0])) add(m, SECRET);
    for (const m of text.matchAll(TOTP)) out.push(new Span(...m.indices!.groups!["value"]!, SECRET));
    for (const m of text.matchAll(WEBHOOK)) add(m, SECRET);
    for (const m of text.matchAll(MAC)) if (macOk(m[0])) add(m, IP);
    for (const m of text.matchAll(DEFANGED_IPV4)) {
      const octets = ["a", "b", "c", "d"].map((k) => Number(asciiDigits(m.groups![k]!)));
      if (octets.every((o) => o <= 255) && !octets.every((o) => o < 10)) add(m, IP);
    }
    for (const m of text.matchAll(COORDS)) if (coordsOk(text, m)) add(m, ADDRESS);
    for (const m of text.matchAll(DMS)) add(m, ADDRESS);
    for (const m of text.matchAll(NANP_RUN)) if (nanpOk(text, m)) add(m, PHONE);
    for (const m of text.matchAll(PHONE_LINKS)) if (linkPhoneOk(m.groups!["n"]!)) add(m, PHONE);
    for (const m of text.matchAll(PO_BOX)) add(m, ADDRESS);
    for (const m of text.matchAll(STREET_NUMBER)) if (matchAt(STREET_NOT, m[0]) === null) add(m, ADDRESS);
    for (const m of text.matchAll(IBAN_DOTTED)) if (ibanDottedOk(m[0])) add(m, IBAN);
    for (const [pattern, module] of SHAPED_IDS) {
      for (const m of text.matchAll(pattern)) if (stdnumValid(module, m[0].toUpperCase())) add(m, NATIONAL_ID);
    }
    return mergeSpans(out);
  }

  hazard(text: string): Span | null {
    const offset = tailStart(text, 96);
    const tail = text.slice(offset);
    const found: Span[] = [];
    for (const pattern of [
      MAC_HAZARD,
      DEFANG_HAZARD,
      PHONE_LINK_HAZARD,
      PO_BOX_HAZARD,
      STREET_NUMBER_HAZARD,
      IBAN_DOTTED_HAZARD,
      SHAPED_SECRET_HAZARD,
      COORD_HAZARD,
      NUMBERING_HAZARD,
      DMS_HAZARD,
    ]) {
      const m = pattern.exec(tail);
      if (m !== null) found.push(new Span(offset + m.index, text.length, SECRET));
    }
    const totp = totpHazard(tail);
    if (totp !== null) found.push(new Span(offset + totp, text.length, SECRET));
    const n = TRAILING_NUMBER.exec(tail);
    if (n !== null && searchIn(COORD_KEYWORD, tail, tailStart(tail.slice(0, n.index), 40), n.index) !== null) {
      found.push(new Span(offset + n.index, text.length, ADDRESS));
    }
    const w = webhookHazard(tail);
    if (w !== null) found.push(new Span(offset + w, text.length, SECRET));
    return found.sort(compareSpans)[0] ?? null;
  }

  forPrompt(): Detector {
    return this;
  }
}
