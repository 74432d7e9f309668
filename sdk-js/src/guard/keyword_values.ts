/**
 * Values a keyword announces: port of privacy/recognizers.py (its keyword-value rules and
 * `KeywordValueRecognizer`).
 *
 * Many identifiers have no shape of their own: a passport number, a 4-digit PIN, an account
 * number, a date are ordinary tokens until a keyword says what they are ("passport no. 01MU33842",
 * "garage pin 4383", "born 25 July 2004"). Each rule is a keyword, an introducer ("is", "was",
 * ":", "number", or nothing) and the value's shape; a validator (stdnum's checksum, a date, digits
 * or symbols in a password) keeps prose out. While the value is being written the keyword makes it
 * a hazard, so its first tokens wait for the rest.
 *
 * The rules match the folded text (`fold`), where every decimal digit of any script is an ASCII
 * digit: `\d` here is Python's `\d` there.
 */

import { type Folded, DIGIT_WORD_PREFIXES, DIGIT_WORDS, fold, foldString } from "./normalize.js";
import { B, NOT_W, S_IN, W, W_IN, escapeRe, fullMatch, matchAt } from "./pyre.js";
import { cpLen, digitCount, isDigit, rstrip, searchIn, tailStart } from "./pystr.js";
import { ADDRESS, IBAN, NATIONAL_ID, SECRET, type Detector, Span, compareSpans, mergeSpans } from "./spans.js";
import { stdnumValid } from "./stdnum_checks.js";

/** An alternation of `words` as the folded text spells them (words of other scripts are folded once).
 * Outside a class the `u` flag refuses `\-` (a folded "ー" is "-"): the hyphen stays bare. */
function folded(...words: string[]): string {
  return words.map((w) => escapeRe(foldString(w)).replaceAll("\\-", "-")).join("|");
}

/** The hazard of a value written with the characters of the class `cls`. */
function chars(cls: string, n = 40): string {
  return `[${cls}]{1,${n}}`;
}

// "is" and "was" in the languages the SDK's users write ("Meu CPF é ...", "Steuer-ID ist ..."), as
// folded: "é"/"è" are "e" (a bare "e" written as such is not one: `plainE`), "är" is "ar".
const IS_WORDS =
  String.raw`(?<is>is|was|are|were|ist|war|lautet|lautete|heisst|est|es|era|e|ar|er|jest|wynosi)(?![a-z])` +
  `|(?:${folded("は", "是", "为", "為", "는", "은", "이", "가")})`;
// A value may open with a quote or a parenthesis ('password is "Tr0ub4dor&3"', "fødselsnummer (2504...)").
const OPEN_QUOTE = "[\"'`\u2018\u201c(]?";
// "is", "was", ":", "=", "#", "number", "no.", "nr." in any order a person writes them, or a space.
const INTRO =
  String.raw`(?:'s)?(?:[ \t]*(?:(?:number|numbers|num|nummer|numero|no\.?|nr\.?|#)(?![a-z]))?[ \t]*(?:=>|[:=#-]|` +
  IS_WORDS +
  String.raw`)[ \t]*|[ \t]+(?:(?:number|num|no\.?|nr\.?|#)(?![a-z])[ \t]*)?)(?:(?:is|was)[ \t]+)?` +
  OPEN_QUOTE;
// The same without a bare space: "is", "was", ":", "=" must say that a value follows.
const INTRO_STRICT =
  String.raw`(?:'s)?[ \t]*(?:(?:number|num|nummer|numero|no\.?|nr\.?|#)(?![a-z])[ \t]*)?(?:=>|[:=]|` +
  IS_WORDS +
  String.raw`)[ \t]*` +
  OPEN_QUOTE;

/** A keyword-anchored value: `keyword`, then an introducer, then `value` (case-insensitive). */
interface Rule {
  readonly kind: string;
  readonly ok: (value: string) => boolean;
  readonly pattern: RegExp;
  /** The value while it is written (`partial`) at the very end. */
  readonly hazard: RegExp;
}

interface RuleOptions {
  ok?: (value: string) => boolean;
  /** The value may follow the keyword after a space alone ("pin 4383"). */
  bare?: boolean;
  /** Keywords of scripts that write no space between words (パスワード, 密码), folded: matched
   * without a word boundary before them. */
  unspaced?: string;
}

function rule(kind: string, keyword: string, value: string, partial: string, options: RuleOptions = {}): Rule {
  const { ok = () => true, bare = true, unspaced = "" } = options;
  const spaced = `(?<!${W})(?:${keyword})`;
  const kw = unspaced ? `(?:${spaced}|${unspaced})` : spaced;
  const intro = bare ? INTRO : INTRO_STRICT;
  return {
    kind,
    ok,
    pattern: new RegExp(`${kw}${intro}(?<value>${value})`, "giud"),
    hazard: new RegExp(`${kw}${intro}(?<value>${partial})$`, "iud"),
  };
}

// Values everybody writes in documentation ("the password is hunter2", "abc123"): not secrets.
const EXAMPLE_VALUES: ReadonlySet<string> = new Set(
  (
    "hunter2 abc123 abcd1234 123456 1234567 12345678 123456789 password password1 password123 passw0rd " +
    "p@ssw0rd changeme changeit secret secret123 qwerty qwerty123 letmein admin admin123 root toor test " +
    "test123 test1234 example foobar foo123 xxxxxx 000000 111111 1234 0000 12345 s3cr3t mypassword " +
    "yourpassword"
  ).split(" "),
);
// A number with a unit is a size or a length, not a value: "2048 bits", "32 bytes", "8 characters".
const UNIT_AFTER = new RegExp(
  String.raw`[ \t]*(?:bits?|bytes?|kb|mb|gb|kib|mib|chars?|characters?|digits?|letters?|words?|rounds?|iterations?` +
    String.raw`|days?|hours?|minutes?|seconds?|ms|times?|long|max|min|%)(?!${W})`,
  "iu",
);
// A placeholder in place of a value: "<password>", "{{ secret }}", "***", "xxxx", "...", "your_password".
const PLACEHOLDER_VALUE =
  /<|\{\{|\*{3}|x{4}|\.{3}|(?:your|my|the|some|any|none|null|nil|empty|redacted|changeme|n\/?a)(?![a-z])/iu;
// Code that reads a password from somewhere is not one: "os.environ['DB_PASS']", "getenv(...)", "$VAR".
const CODE_VALUE = new RegExp(
  String.raw`[A-Za-z_]${W}*(?:\.[A-Za-z_]${W}*)*[\[(]|\$\{|\$[A-Z_][A-Z0-9_]*(?![${W_IN}!#%^&*?])|%${W}+%` +
    String.raw`|${W}+\.${W}+\.${W}+`,
  "u",
);

const DIGIT_OR_SYMBOL = new RegExp(`[\\p{Nd}_]|${NOT_W}`, "u");
const SYMBOL = new RegExp(NOT_W, "u");
const PATH_OR_FILE = new RegExp(String.raw`[/\\]|\.${W}{2,4}$`, "u");

/** A password a person wrote: digits or symbols in it, not an example, a placeholder or code. */
export function passwordOk(value: string): boolean {
  const v = rstrip(value, ".,;:!?)");
  if (
    cpLen(v) < 6 ||
    EXAMPLE_VALUES.has(v.toLowerCase()) ||
    matchAt(PLACEHOLDER_VALUE, v) !== null ||
    matchAt(CODE_VALUE, v) !== null
  ) {
    return false;
  }
  // A long digit run after "password" is an ID more often than not.
  if (isDigit(v)) return cpLen(v) <= 12;
  return DIGIT_OR_SYMBOL.test(v) && fullMatch(/[\p{Nd}.,]+[a-z]{0,3}/iu, v) === null;
}

/** A password after a bare keyword: letters with digits and an upper-case letter or a symbol
 * ("Chelsea2000!"); "password reset2" or "password hashing" are prose. */
export function strongPasswordOk(value: string): boolean {
  const v = rstrip(value, ".,;:)");
  return (
    passwordOk(v) &&
    /[A-Za-z]/.test(v) &&
    /\p{Nd}/u.test(v) &&
    (/[A-Z]/.test(v) || SYMBOL.test(v)) &&
    !PATH_OR_FILE.test(v) // a path or a file name
  );
}

/** A value after a bare "key": lower-case letters beyond hex with 3+ digits (a cache key or a
 * digest in hex is developer text; a generated API key is not hex). */
function plainKeyOk(value: string): boolean {
  return keyOk(value) && /[g-z]/.test(value) && digitCount(value) >= 3;
}

export function pinOk(value: string): boolean {
  const digits = value.replace(/\P{Nd}/gu, "");
  return (
    !EXAMPLE_VALUES.has(digits) && new Set(digits).size > 1 && (cpLen(digits) <= 8 || digits !== value)
  );
}

/** A key's value: 16+ characters of hex or of lower-case letters with digits (upper-case mixed
 * values are already `looksRandom`); not a word, a path or a size. */
function keyOk(value: string): boolean {
  const v = rstrip(value, ".,;:");
  if (cpLen(v) < 16 || EXAMPLE_VALUES.has(v.toLowerCase()) || new Set(v).size < 6) return false;
  // A "0x" literal of 64 bits or less is a number in code (a multiplier, a seed, a mask); keys
  // written with "0x" (a wallet's private key, an AES key) are 32+ hex digits.
  if (fullMatch(/0x[0-9a-f]{1,16}/iu, v) !== null) return false;
  return (
    fullMatch(/(?:0x)?[0-9a-f]{16,}/iu, v) !== null ||
    (fullMatch(/[a-z0-9_-]{16,}/u, v) !== null && digitCount(v) >= 3)
  );
}

const PASSWORD_WORDS =
  String.raw`(?:wi-?fi|router|door|admin|root|login|account|email|vpn|bank|master|my|the)?[ \t]*` +
  String.raw`(?:passwords?|passwd|pass[ -]?phrase|pwd|pw` +
  // German, French, Spanish, Portuguese, Italian/Turkish, Dutch, Swedish, Danish/Norwegian,
  // Finnish, Polish/Czech, Hungarian, Romanian/Russian (as folded: accents dropped, "ß" is "ss").
  String.raw`|passwort|kennwort|mot[ \t]+de[ \t]+passe|mdp|contrasena|clave|senha|palavra[ -]passe|parola(?:[ \t]+d'ordine)?` +
  String.raw`|sifre|wachtwoord|losenord(?:et)?|adgangskode(?:n)?|passord(?:et)?|salasana|haslo|heslo|jelszo|parol` +
  ")";
// The same words in scripts that write no spaces or look nothing like Latin.
const PASSWORD_UNSPACED = folded(
  "パスワード",
  "暗証番号",
  "密码",
  "密碼",
  "口令",
  "비밀번호",
  "암호",
  "пароль",
  "κωδικός",
  "كلمة المرور",
  "סיסמה",
);
const PIN_WORDS =
  String.raw`pin(?:[ -]?(?:code|nummer|nr\.?|numero|kod|kode|koodi))?|geheimzahl|(?:code|codigo|codice|numero|kod)[ \t]+pin` +
  String.raw`|(?:code|codigo|codice)[ \t]+(?:secret|secreto|segreto)|passcode|pass[ -]code` +
  String.raw`|(?:door|gate|garage|alarm|access|security|entry|entrance|lock|safe` +
  String.raw`|keypad|unlock|lockbox|building|gym|locker|bike[ -]lock|padlock|voicemail|sim|puk)` +
  String.raw`[ \t]+(?:code|pin|combo|combination)` +
  "|puk";
const byLength = (words: Iterable<string>): string[] => [...words].sort((a, b) => b.length - a.length);
const NUMBER_WORD = `(?:${byLength(DIGIT_WORDS).join("|")})`;
const NUMBER_WORD_PREFIX = `(?:${byLength(new Set([...DIGIT_WORD_PREFIXES, ...DIGIT_WORDS])).join("|")})`;
const PIN_UNSPACED = folded("暗証番号", "暗証コード", "pin码", "pin碼", "密码", "密碼", "핀번호", "пин-код", "пин");
const KEY_WORDS =
  // A bounded prefix ("DD_API_KEY", "stripe-secret-key"): unbounded, it scanned to the end of the
  // text after every "-" and backed up (quadratic).
  String.raw`[${W_IN}-]{0,32}?(?:api|auth|access|secret|private|priv|signing|encryption|master|license|licence|app|client|dd|datadog)` +
  String.raw`[ _-]?keys?|privkey|apikey|api[ _-]token|secret|seed|access[ _-]token|bearer|token`;

// National identifiers with a checksum too weak (or no shape strong enough) to find them without
// their name: 8-12 digits are counters and IDs everywhere in developer text.
// [keyword, value, stdnum module, partial characters]
const ID_RULES_SPEC: readonly (readonly [string, string, string, string])[] = [
  [String.raw`ssn|social[ \t]+security(?:[ \t]+(?:number|no\.?|#))?|ss#`, String.raw`\d{3}[ -]?\d{2}[ -]?\d{4}`, "us.ssn", String.raw`\d -`],
  [String.raw`cpf`, String.raw`\d{3}\.?\d{3}\.?\d{3}-?\d{2}`, "br.cpf", String.raw`\d.\-`],
  [String.raw`aadhaa?r(?:[ \t]+(?:card|id))?|uidai|uid`, String.raw`\d{4}[ -]?\d{4}[ -]?\d{4}`, "in_.aadhaar", String.raw`\d -`],
  [String.raw`pan(?:[ \t]+card)?|permanent[ \t]+account`, String.raw`[a-z]{5}\d{4}[a-z]`, "in_.pan", String.raw`a-z0-9`],
  [
    String.raw`steuer[ -]?id(?:entifikationsnummer)?|steuer[ -]?nummer|steuerliche[ \t]+identifikationsnummer` +
      String.raw`|identifikationsnummer|idnr|tin|tax[ \t]+id(?:entification)?`,
    String.raw`\d{2}[ /]?\d{3}[ /]?\d{3}[ /]?\d{3}`,
    "de.idnr",
    String.raw`\d /`,
  ],
  // A taxpayer number of 11 digits is a CPF as often as a Steuer-ID: both checksums are tried.
  [
    String.raw`taxpayer[ \t]+(?:id|number|no\.?)|tax[ \t]+(?:id|number|no\.?)|tin`,
    String.raw`\d{3}\.?\d{3}\.?\d{3}-?\d{2}`,
    "br.cpf",
    String.raw`\d.\-`,
  ],
  [String.raw`tfn|tax[ \t]+file`, String.raw`\d{3}[ ]?\d{3}[ ]?\d{2,3}`, "au.tfn", String.raw`\d `],
  // Personal identifiers stdnum validates (a birth date and a check digit in most), by their names
  // in their countries: a bare run of 10-13 digits is a timestamp or a counter as often.
  [String.raw`pesel`, String.raw`\d{11}`, "pl.pesel", String.raw`\d`],
  [
    String.raw`personnummer|personnr|personal[ \t]+identity[ \t]+number`,
    String.raw`(?:\d{2})?\d{6}[-+ ]?\d{4}`,
    "se.personnummer",
    String.raw`\d\-+ `,
  ],
  [String.raw`hetu|henkil[oö]tunnus|personbeteckning`, String.raw`\d{6}[-+a-fu-y]\d{3}[0-9a-y]`, "fi.hetu", String.raw`\da-y\-+`],
  [
    String.raw`rrn|resident[ \t]+registration(?:[ \t]+(?:number|no\.?))?|jumin(?:[ \t]+number)?|주민등록번호`,
    String.raw`\d{6}-?\d{7}`,
    "kr.rrn",
    String.raw`\d\-`,
  ],
  [String.raw`cpr(?:[ -]?(?:nr\.?|number|nummer))?`, String.raw`\d{6}-?\d{4}`, "dk.cpr", String.raw`\d\-`],
  [String.raw`f[oø]dselsnummer|fnr`, String.raw`\d{6} ?\d{5}`, "no.fodselsnummer", String.raw`\d `],
  [String.raw`rodn[eé][ \t]+[cč][ií]slo`, String.raw`\d{6}\/?\d{3,4}`, "cz.rc", String.raw`\d\/`],
  [String.raw`egn|егн`, String.raw`\d{10}`, "bg.egn", String.raw`\d`],
  [String.raw`cnp`, String.raw`\d{13}`, "ro.cnp", String.raw`\d`],
  [String.raw`amka`, String.raw`\d{11}`, "gr.amka", String.raw`\d`],
  [String.raw`oib`, String.raw`\d{11}`, "hr.oib", String.raw`\d`],
  [String.raw`pps(?:[ \t]+(?:number|no\.?))?`, String.raw`\d{7}[a-w][a-iw]?`, "ie.pps", String.raw`\da-w`],
  [String.raw`kennitala`, String.raw`\d{6}-?\d{4}`, "is_.kennitala", String.raw`\d\-`],
  [String.raw`isikukood`, String.raw`\d{11}`, "ee.ik", String.raw`\d`],
  [String.raw`asmens[ \t]+kodas`, String.raw`\d{11}`, "lt.asmens", String.raw`\d`],
  [String.raw`em[sš]o`, String.raw`\d{13}`, "si.emso", String.raw`\d`],
  [String.raw`curp`, String.raw`[a-z]{4}\d{6}[a-z]{6}[0-9a-z]\d`, "mx.curp", String.raw`a-z0-9`],
  [String.raw`rut|run`, String.raw`\d{1,2}\.?\d{3}\.?\d{3}-?[\dk]`, "cl.rut", String.raw`\dk.\-`],
  [String.raw`t\.?c\.?[ \t]+kimlik(?:[ \t]+no)?|tckn|kimlik[ \t]+no`, String.raw`\d{11}`, "tr.tckimlik", String.raw`\d`],
  [String.raw`ahv(?:[ -]?nr\.?)?|avs`, String.raw`756\.?\d{4}\.?\d{4}\.?\d{2}`, "ch.ssn", String.raw`\d.`],
  [
    String.raw`rijksregisternummer|national[ \t]+number|num[eé]ro[ \t]+national`,
    String.raw`\d{2}\.?\d{2}\.?\d{2}-?\d{3}\.?\d{2}`,
    "be.nn",
    String.raw`\d.\-`,
  ],
  [String.raw`teudat[ \t]+zehut|israeli[ \t]+id`, String.raw`\d{5,9}`, "il.idnr", String.raw`\d`],
  [String.raw`resident[ \t]+identity[ \t]+card|身份证(?:号)?|shenfenzheng`, String.raw`\d{17}[\dx]`, "cn.ric", String.raw`\dx`],
  [String.raw`thai[ \t]+id|เลขประจำตัวประชาชน`, String.raw`\d-?\d{4}-?\d{5}-?\d{2}-?\d`, "th.pin", String.raw`\d\-`],
  [String.raw`my[ \t]+number|individual[ \t]+number|マイナンバー`, String.raw`\d{4} ?\d{4} ?\d{4}`, "jp.in_", String.raw`\d `],
  [String.raw`nric|mykad`, String.raw`\d{6}-?\d{2}-?\d{4}`, "my.nric", String.raw`\d\-`],
  [String.raw`nhs(?:[ \t]+(?:number|no\.?))?`, String.raw`\d{3}[ -]?\d{3}[ -]?\d{4}`, "gb.nhs", String.raw`\d -`],
  [String.raw`bsn|burgerservicenummer`, String.raw`\d{9}`, "nl.bsn", String.raw`\d`],
  [String.raw`nie`, String.raw`[xyz]-?\d{7}-?[a-z]`, "es.nie", String.raw`xyz\da-z\-`],
  [String.raw`cuit|cuil`, String.raw`\d{2}-?\d{8}-?\d`, "ar.cuit", String.raw`\d\-`],
  [String.raw`c[eé]dula`, String.raw`\d{10}`, "ec.ci", String.raw`\d`],
  [String.raw`south[ \t]+african[ \t]+id|sa[ \t]+id`, String.raw`\d{13}`, "za.idnr", String.raw`\d`],
  [
    String.raw`codice[ \t]+fiscale|cf|c\.f\.`,
    String.raw`[a-z]{6}[0-9lmnpqrstuv]{2}[a-z][0-9lmnpqrstuv]{2}[a-z][0-9lmnpqrstuv]{3}[a-z]`,
    "it.codicefiscale",
    String.raw`a-z0-9`,
  ],
];
const DOCUMENT_WORDS =
  String.raw`passport|passeport|reisepass|pasaporte|passaporto` +
  String.raw`|driver'?s?[ \t]+licen[cs]e|driving[ \t]+licen[cs]e|drivers?[ \t]+licen[cs]e` +
  String.raw`|licen[cs]e[ \t]+(?:number|no\.?|#)|dl` +
  String.raw`|f(?:ue|ü)hrerschein|permis[ \t]+de[ \t]+conduire|id[ \t]+card|identity[ \t]+card|national[ \t]+id` +
  String.raw`|personalausweis` +
  String.raw`|vin|vehicle[ \t]+identification|mrn|medical[ \t]+record|nhs|insurance[ \t]+(?:number|no\.?|id)` +
  String.raw`|member[ \t]+id|policy[ \t]+(?:number|no\.?)`;

/** A document number: 6-20 letters and digits (hyphens between), with a digit, not a year or a size. */
function documentOk(value: string): boolean {
  const v = rstrip(value, ".,;:");
  const compact = v.replaceAll("-", "").replaceAll(" ", "");
  if (!(6 <= cpLen(compact) && cpLen(compact) <= 20) || !/\p{Nd}/u.test(compact)) return false;
  if (fullMatch(/(?:19|20)\p{Nd}\p{Nd}/u, compact) !== null || EXAMPLE_VALUES.has(v.toLowerCase())) return false;
  // "expires", "photo": a word is not a number; a code has at least two digits.
  return digitCount(compact) >= 2;
}

// Dates of birth: a date right after a birth keyword, in the languages the SDK's users write.
const MONTHS =
  String.raw`jan(?:uary|vier|uar|\.)?|feb(?:ruary|\.)?|f[ée]vr(?:ier|\.)?|mar(?:ch|s|\.)?|m[äa]rz|apr(?:il|\.)?|avr(?:il|\.)?` +
  String.raw`|may|mai|june?|juin|juni|july?|juil(?:let|\.)?|juli|aug(?:ust|\.)?|ao[ûu]t|sep(?:t(?:ember|embre)?|\.)?` +
  String.raw`|oct(?:ober|obre|\.)?|okt(?:ober|\.)?|nov(?:ember|embre|\.)?|dec(?:ember|\.)?|d[ée]c(?:embre|\.)?|dez(?:ember|\.)?` +
  String.raw`|enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|octubre|noviembre|diciembre` +
  String.raw`|gennaio|febbraio|aprile|maggio|giugno|luglio|settembre|ottobre|dicembre`;
const DATE =
  String.raw`\d{1,2}[./-]\d{1,2}[./-](?:\d{4}|\d{2})(?![\d./-])|\d{4}[./-]\d{1,2}[./-]\d{1,2}(?![\d./-])` +
  String.raw`|\d{1,2}(?:st|nd|rd|th|er|\.)?[ \t]+(?:of[ \t]+|de[ \t]+)?(?:${MONTHS})\.?,?[ \t]+(?:de[ \t]+)?\d{4}` +
  String.raw`|(?:${MONTHS})\.?[ \t]+\d{1,2}(?:st|nd|rd|th)?,?[ \t]+\d{4}|(?:${MONTHS})\.?[ \t]+\d{4}`;
const BIRTH_WORDS =
  String.raw`born(?:[ \t]+(?:on|in))?|b\.|dob|d\.o\.b\.?|date[ \t]+of[ \t]+birth|birth[ \t]?date|birthday|bday|d\.?o\.?b` +
  String.raw`|geb\.|geboren(?:[ \t]+am)?|geburtsdatum|geburtstag|n[ée]e?(?:[ \t]+le)?|date[ \t]+de[ \t]+naissance` +
  String.raw`|nacid[oa](?:[ \t]+el)?|fecha[ \t]+de[ \t]+nacimiento|nat[oa](?:[ \t]+il)?|data[ \t]+di[ \t]+nascita`;

// Bank details: a UK sort code or a US routing number, with the account number that follows it.
const ACCOUNT = String.raw`(?:[,;]?[ \t]*(?:and[ \t]+)?(?:account|acct|a\/c|acc)\.?(?:[ \t]+(?:number|no\.?|#))?[ \t]*[:#]?[ \t]*\d{6,17})?`;
// The account part of "sort code 66-04-87, account 6475..." while it is written.
const ACCOUNT_PARTIAL = String.raw`\d[\d -]{0,9}(?:[,;]?[ \t]*(?:and[ \t]+)?[a-z\/]{0,7}\.?(?:[ \t]+[a-z.#]{0,6})?[ \t]*[:#]?[ \t]*\d{0,17})?`;
const DATE_PARTIAL =
  String.raw`\d[\d ./-]{0,9}|\d{1,2}(?:st|nd|rd|th|er|\.)?[ \t]+(?:of[ \t]+|de[ \t]+)?[a-zé]{0,9}\.?,?[ \t]*\d{0,4}` +
  String.raw`|[a-zéû]{1,9}\.?[ \t]*\d{0,2}(?:st|nd|rd|th)?,?[ \t]*\d{0,4}`;

// The dates code and test data put where a date must be: the Unix epoch, the ends of centuries and
// of the millennium, the last day a date type holds ("dob 1999-12-31 in fixture").
const SENTINEL_YEARS: ReadonlySet<string> = new Set(["1900", "1970", "1999", "2000", "0001", "9999"]);
const FIRST_OR_LAST_MONTH =
  /(?<jan>jan(?:uary|vier|uar|\.)?|enero|gennaio)|(?<dec>dec(?:ember|embre|\.)?|dez(?:ember|\.)?|diciembre|dicembre)/u;

/** A date that may be somebody's birth: not a sentinel date (1 January or 31 December of
 * `SENTINEL_YEARS`), not before 1900 or in a year to come. A date of birth is in the past. */
function birthOk(value: string): boolean {
  const year = /(?<!\d)\d{4}(?!\d)/u.exec(value);
  if (year === null) return true; // "25.07.04": a two-digit year says nothing more
  const y = Number(year[0]);
  if (!(1900 <= y && y <= new Date().getFullYear())) return false;
  const rest = value.slice(0, year.index) + " " + value.slice(year.index + 4);
  let numbers = [...rest.matchAll(/\d{1,2}/gu)].map((m) => Number(m[0]));
  const month = FIRST_OR_LAST_MONTH.exec(rest.toLowerCase());
  if (month !== null) numbers.push(month.groups!["jan"] !== undefined ? 1 : 12);
  numbers = numbers.sort((a, b) => a - b);
  const sentinel = numbers.length === 2 && ((numbers[0] === 1 && numbers[1] === 1) || (numbers[0] === 12 && numbers[1] === 31));
  return !(SENTINEL_YEARS.has(year[0]) && sentinel);
}

function routingOk(value: string): boolean {
  return stdnumValid("us.rtn", value.slice(0, 9));
}

function buildRules(): Rule[] {
  const password = String.raw`[^${S_IN}"'\x60]{6,64}`;
  const passwordPartial = chars(String.raw`^${S_IN}"'\x60`, 64);
  const out = [
    rule(SECRET, PASSWORD_WORDS, password, passwordPartial, { ok: passwordOk, bare: false, unspaced: PASSWORD_UNSPACED }),
    // Without "is" or ":" ("login with password Chelsea2000!") only a value no prose word looks like.
    rule(SECRET, PASSWORD_WORDS, password, passwordPartial, { ok: strongPasswordOk, unspaced: PASSWORD_UNSPACED }),
    rule(SECRET, "keys?", String.raw`[a-z0-9]{16,}(?![${W_IN}-])`, chars("a-z0-9", 64), { ok: plainKeyOk }),
    rule(
      ADDRESS,
      String.raw`zip(?:[ \t]?code)?|post[ \t]?code|postal[ \t]+code|plz|code[ \t]+postal`,
      String.raw`\d{5}(?:-\d{4})?(?![${W_IN}-])|[a-z]{1,2}\d[a-z\d]?[ \t]?\d[a-z]{2}(?!${W})`,
      chars(`${W_IN} -`, 10),
    ),
    rule(
      SECRET,
      PIN_WORDS,
      // Also spaced out ("4 7 1 9", "47 19", "4-7-1-9", and so spelled out: "four seven one nine"
      // folds to "4 7 1 9").
      String.raw`(?:\d(?:[ \t]\d){3,11}|\d(?:-\d){3,11}|\d\d(?:[ \t]\d\d){1,5}|\d{4,8})` +
        String.raw`(?![${W_IN}/:-]|[.,]\d)(?![ \t]+(?:release|version|build|edition|update|branch)${B})`,
      // While written: digits and their separators, or a number word's first letters after them
      // (the first word of a spelled PIN is not folded to a digit until the second).
      String.raw`(?:(?:\d|${NUMBER_WORD})[ \t,-]{0,3}){0,11}(?:\d|${NUMBER_WORD_PREFIX})[ \t,-]{0,3}`,
      { ok: pinOk, unspaced: PIN_UNSPACED },
    ),
    rule(SECRET, KEY_WORDS, String.raw`(?:0x)?[a-z0-9_\-]{16,}(?![${W_IN}-])`, chars(String.raw`a-z0-9_\-`, 80), {
      ok: keyOk,
    }),
    rule(
      NATIONAL_ID,
      DOCUMENT_WORDS,
      String.raw`[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])|(?<=\d) (?=\d)){5,21}(?![${W_IN}-])`,
      chars(String.raw`a-z0-9\- `, 24),
      { ok: documentOk },
    ),
    rule(NATIONAL_ID, BIRTH_WORDS, `(?:${DATE})`, DATE_PARTIAL, { ok: birthOk }),
    rule(IBAN, String.raw`sort[ \t]?code`, String.raw`\d{2}[- ]?\d{2}[- ]?\d{2}(?!\d)` + ACCOUNT, ACCOUNT_PARTIAL),
    rule(IBAN, "routing|aba|rtn|bank[ \\t]+routing", String.raw`\d{9}(?!\d)` + ACCOUNT, ACCOUNT_PARTIAL, {
      ok: routingOk,
    }),
    rule(
      IBAN,
      String.raw`bank[ \t]+account|account[ \t]+(?:number|no\.?|#)|acct|a\/c|bank[ \t]+acc(?:oun)?t|konto(?:nummer)?|cuenta`,
      String.raw`\d{6,17}(?![${W_IN}.,-]|[.,]\d)`,
      chars(String.raw`\d`, 17),
    ),
    // "account" alone is a test fixture's or a cloud's as often: only with "is" or ":".
    rule(IBAN, "account", String.raw`\d{6,17}(?![${W_IN}.,-]|[.,]\d)`, chars(String.raw`\d`, 17), { bare: false }),
  ];
  for (const [keyword, value, module, partial] of ID_RULES_SPEC) {
    out.push(
      rule(NATIONAL_ID, keyword, `${value}(?![${W_IN}-])`, chars(partial, 20), {
        ok: (v) => stdnumValid(module, v.toUpperCase()),
      }),
    );
  }
  return out;
}

let RULES: readonly Rule[] | null = null;

const ACCOUNT_NOT_BANK = new RegExp(
  String.raw`(?:aws|gcp|azure|cloud|service|user|github|twitter|x)[ \t]+(?:account|acct)${B}`,
  "iu",
);

/** Values a keyword announces: passwords, PINs and keys ("is", "was", ":" or a bare keyword),
 * national identifiers by their name with stdnum's checksum, passport and licence numbers, dates
 * of birth, bank account numbers. */
export class KeywordValueRecognizer implements Detector {
  private readonly rules: readonly Rule[];

  constructor() {
    RULES ??= buildRules();
    this.rules = RULES;
  }

  find(text: string): Span[] {
    // On the folded text: a full-width "ｐｉｎ：４７１９", a spelled-out "four seven one nine", a
    // "contraseña" are the plain forms the rules are written for.
    const f = fold(text);
    const t = f.text;
    const out: Span[] = [];
    for (const r of this.rules) {
      for (const m of t.matchAll(r.pattern)) {
        if (plainE(f, m)) continue;
        const [a, end] = m.indices!.groups!["value"]!;
        if (r.kind === SECRET && matchAt(UNIT_AFTER, t, end) !== null) continue;
        if (r.kind === IBAN && searchIn(ACCOUNT_NOT_BANK, t, Math.max(0, m.index - 12), a) !== null) continue;
        const value = cased(f, a, end); // what the validators see: the case as written
        if (r.ok(value)) {
          // A sentence's full stop is not part of the value; a password's "!" or "?" may be.
          const b = end - (value.length - rstrip(value, r.kind === SECRET ? ".,;:)" : ".,;:!?)").length);
          out.push(new Span(...f.span(a, b), r.kind));
        }
      }
    }
    return mergeSpans(out);
  }

  hazard(text: string): Span | null {
    const offset = tailStart(text, 120);
    const f = fold(text.slice(offset));
    const found: Span[] = [];
    for (const r of this.rules) {
      const m = r.hazard.exec(f.text);
      if (m !== null && !plainE(f, m)) {
        found.push(new Span(offset + f.rawStart(m.indices!.groups!["value"]![0]), text.length, r.kind));
      }
    }
    return found.sort(compareSpans)[0] ?? null;
  }

  forPrompt(): Detector {
    return this;
  }
}

/** The rule's "is" is an "e" written without an accent: Italian "è" and Portuguese "é" fold to
 * "e", a bare "e" ("password e-mailed") is not one. */
function plainE(f: Folded, m: RegExpExecArray | RegExpMatchArray): boolean {
  if (m.groups?.["is"] !== "e") return false;
  const raw = f.raw[f.starts[m.indices!.groups!["is"]![0]]!]!;
  return raw === "e" || raw === "E";
}

/** Folded `[a, b)` with the case of the raw characters it came from (a full-width "Ｐ" is "P"). */
function cased(f: Folded, a: number, b: number): string {
  let out = "";
  for (let i = a; i < b; ) {
    const c = String.fromCodePoint(f.text.codePointAt(i)!);
    const raw = f.raw.slice(f.starts[i], f.ends[i]);
    out += cpLen(raw) === 1 && /^\p{Uppercase}$/u.test(raw) && /^\p{L}$/u.test(c) ? c.toUpperCase() : c;
    i += c.length;
  }
  return out;
}
