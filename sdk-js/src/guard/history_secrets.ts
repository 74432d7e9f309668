/**
 * Every secret the user's own history shows, registered (`HistorySecretDetector`, issue 30);
 * port of privacy/history_secrets.py.
 *
 * A history holds what a developer once pasted: a database password in a `.env` snippet, a cloud
 * key pair in a profile, a bot token in a sentence. The verbatim-history rule does not see them
 * (one identifier of 8-15 tokens is not a passage, by design), and they are not registered
 * canaries. So the device registers them from the history itself: every value `secretValues`
 * finds there, hex strings of 20+ characters that a secret-sounding word introduces, and the
 * secrets prose states ("password is X", "PIN: 4417").
 *
 * A registered secret is found whole, or as any piece of it of `minPiece`+ characters that is not
 * a plain word; as hex or base64 of itself at any byte offset; and split into words with text
 * between ("Note aD6; the rest is IA5+~nOp"), each part a span however short - all on the folded
 * text. Its hazard holds a trailing run that is still a piece of a secret (from two characters),
 * the start of one of its encodings, and a recent word that may be a split secret's first part,
 * for `splitGap` characters: the rest may follow.
 */

import { passwordOk, pinOk, strongPasswordOk } from "./keyword_values.js";
import { fold } from "./normalize.js";
import { B, D, NOT_S, NOT_W, S_IN, W, W_IN, fullMatch, matchAt, splitWords } from "./pyre.js";
import {
  byCodePoint,
  cpLen,
  isAlnum,
  isDigit,
  lstrip,
  reversed,
  rstrip,
  strip,
  tailStart,
  utf8Hex,
} from "./pystr.js";
import { namesASecret, secretValues } from "./recognizers.js";
import { encodings, widenEncoded } from "./registered.js";
import { SECRET, Span, mergeSpans, type Detector } from "./spans.js";

const INTRODUCED_HEX = new RegExp(
  `${B}(?:token|secret|key|password|passwd|pwd|credentials?|bearer|auth(?:orization|entication)?)${NOT_W}{1,3}` +
    `(?:${W}+${NOT_W}{1,3}){0,2}?` +
    String.raw`(?<value>[0-9a-f]{20,})(?![0-9a-z])`,
  "giu",
);

// Secrets a history states in prose, by a keyword and the shape after it (issue #49): "password is
// X", "password: X", "pw X", "PIN: 4417", "alarm code 4417", "passphrase: four plain words",
// "KEY=value" where the key names a secret, "admin / Sunflower!1987" after a login word. Each
// value is registered whole (never a prefix the keyword shares with prose).
const QUOTE = "[\"'\\x60]";
const IS = String.raw`(?:[ \t]*(?:is|was|=|:|->)[ \t]*|[ \t]+)` + `${QUOTE}?`;
// Between a keyword and its "is"/":" a note may name where or what it is for, in up to three
// words or a parenthesis: "the wifi password there is X", "password for the NAS: X", "passphrase
// (keep the card in the drawer): X". Only before a strict separator: without one, the words after
// a keyword are the sentence's.
const WHERE = String.raw`(?:[ \t]+(?!(?:is|was)${B})[${W_IN}.-]{1,16}){0,3}?(?:[ \t]*\([^)\n]{0,80}\))?`;
const PROSE_PASSWORD = new RegExp(
  String.raw`(?<![${W_IN}-])(?:pass(?:word|wd)s?|pwd|pw|kennwort|passwort|mot de passe|contrase[nñ]a|senha` +
    String.raw`|wi-?fi(?:[ \t]+(?:key|code|pass|pw))?|wlan|wpa2?[ \t]+key|network[ \t]+key)` +
    String.raw`(?:(?<strict>${WHERE}[ \t]*(?:is|was|=|:|->)[ \t]*)|[ \t]+)${QUOTE}?(?<value>[^${S_IN}"'\x60]{6,64})`,
  "giu",
);
const PROSE_PIN = new RegExp(
  String.raw`(?<![${W_IN}-])(?:pin|passcode` +
    String.raw`|(?:alarm|door|gate|garage|safe|lock|keypad|entry|access|security|lockbox|locker)` +
    String.raw`[ \t]+(?:code|pin|combo|combination))(?:[ \t]*(?:number|no\.?|#))?` +
    IS +
    String.raw`(?<value>${D}{4,8})(?![${W_IN}/:-]|[.,]${D})`,
  "giu",
);
const PROSE_PASSPHRASE = new RegExp(
  String.raw`(?<![${W_IN}-])pass[ -]?phrase${WHERE}(?:[ \t]*(?:is|was|=|:|->)[ \t]*)${QUOTE}?` +
    String.raw`(?<value>[a-z]{2,12}(?:[ \t-][a-z]{2,12}){2,7})(?!${W})`,
  "giu",
);
const FUNCTION_WORDS: ReadonlySet<string> = new Set(
  (
    "a an the is are was were be been to of in on at by for from with and or but not no it its this that " +
    "these those as if then than so do does did has have had will would can could should may must see set " +
    "stored kept saved in into our your my their his her"
  ).split(" "),
);
const PROSE_ASSIGNMENT = new RegExp(
  String.raw`(?<![${W_IN}.-])(?:export[ \t]+)?(?<key>[A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*["']?` +
    String.raw`(?<value>[^${S_IN}"'\x60]{6,128})`,
  "gu",
);
const SECRET_KEY_WORDS: ReadonlySet<string> = new Set([
  "token",
  "secret",
  "password",
  "passwd",
  "pass",
  "pwd",
  "key",
  "apikey",
  "passphrase",
  "credential",
  "credentials",
]);
const LOGIN_PAIR = new RegExp(
  String.raw`(?<![${W_IN}-])(?:admin|login|user(?:name)?|account|root)${B}[^\n/]{0,24}?` +
    String.raw`(?<!${W})(?<user>[${W_IN}.@-]{2,40})?` +
    String.raw`[ \t]*/[ \t]*(?<value>[^${S_IN}/"'\x60]{6,64})`,
  "giu",
);
const CONSTANT = /^[A-Z0-9]+(?:_[A-Z0-9]+)+$/u;

/** Every match of `pattern`, one from each start: "Wifi at the cabin: password is X" holds a
 * keyword ("password") inside the first keyword's match ("Wifi at the cabin: password"). */
function* overlapping(pattern: RegExp, text: string): Generator<RegExpExecArray> {
  const re = new RegExp(pattern.source, pattern.flags.includes("g") ? pattern.flags : pattern.flags + "g");
  let pos = 0;
  for (;;) {
    re.lastIndex = pos;
    const m = re.exec(text);
    if (m === null) return;
    yield m;
    pos = m.index + 1;
  }
}

/** The secrets `text` states in prose (see `PROSE_PASSWORD` and the patterns after it), as written. */
export function proseSecrets(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of overlapping(PROSE_PASSWORD, text)) {
    const value = rstrip(m.groups!.value!, ".,;:)");
    const ok = m.groups!.strict ? passwordOk : strongPasswordOk;
    if (ok(value)) out.add(value);
  }
  for (const m of text.matchAll(PROSE_PIN)) {
    if (pinOk(m.groups!.value!)) out.add(m.groups!.value!);
  }
  for (const m of text.matchAll(PROSE_PASSPHRASE)) {
    // "passphrase: is set in the config" is a sentence: a passphrase's words are no function words.
    if (!m.groups!.value!.toLowerCase().split(/[ \t-]+/u).some((w) => FUNCTION_WORDS.has(w))) {
      out.add(m.groups!.value!);
    }
  }
  for (const m of text.matchAll(PROSE_ASSIGNMENT)) {
    const key = m.groups!.key!;
    const words = key
      .toLowerCase()
      .split(/_+/u)
      .filter((w) => w !== "");
    const value = rstrip(m.groups!.value!, ".,;:)");
    if (words.some((w) => SECRET_KEY_WORDS.has(w)) && namesASecret(key, 0) && passwordOk(value)) out.add(value);
  }
  for (const m of text.matchAll(LOGIN_PAIR)) {
    const value = rstrip(m.groups!.value!, ".,;:)");
    if (strongPasswordOk(value)) out.add(value);
  }
  // An identifier's name after "password:" ("MAX_RETRY_COUNT2", "SHA256_DIGEST") names a thing.
  return new Set([...out].filter((v) => fullMatch(NAME, v) === null && fullMatch(CONSTANT, v) === null));
}

/** The secrets a history shows (see the module comment), as written. */
export function historySecrets(history: Iterable<string>): Set<string> {
  const out = new Set<string>();
  for (const text of history) {
    for (const [a, b] of secretValues(text)) {
      const value = strip(text.slice(a, b));
      if (secretLike(value)) out.add(value);
    }
    for (const m of text.matchAll(INTRODUCED_HEX)) out.add(m.groups!.value!);
    for (const v of proseSecrets(text)) out.add(v);
  }
  return out;
}

// What a secret shares with every other of its kind, no secret alone: a URL's scheme, host and
// plain path words ("https://hooks.slack.com/services/"), a vendor's prefix ("ghp_", "github_pat_",
// "xoxb-", "sk-proj-", "AKIA"). A piece or part of a secret must reach past it.
const URL_PREFIX = new RegExp(String.raw`[a-z][a-z0-9+.-]*://[^/${S_IN}]*/(?:[a-z]+(?:[._-][a-z]+)*/)*`, "u");
// Only before a long generated run: "fjordlys-" of a password, "granite-plum-" of a passphrase is no vendor's.
const VENDOR_PREFIX = /(?:[a-z]{2,10}[_-]){1,3}(?=(?=[a-z_-]*\d)[a-z0-9_-]{16,}$)|akia|asia|aiza|eyj|sg\./u;

/** The length of `secret`'s (folded) generic prefix (see `URL_PREFIX`); 0 if none. */
export function genericPrefix(secret: string): number {
  const m = matchAt(URL_PREFIX, secret) ?? (cpLen(secret) >= 20 ? matchAt(VENDOR_PREFIX, secret) : null);
  const end = m === null ? 0 : m.index + m[0].length;
  return m !== null && end < secret.length ? end : 0;
}

const NAME = /[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+(?:[A-Z][a-z]+)+/u;
const SETTING = new RegExp(`[A-Za-z_][${W_IN}.-]*=`, "u");
const VALUE_KINDS = [/[a-z]/u, /[A-Z]/u, new RegExp(D, "u"), /[^A-Za-z0-9]/u];

/** A value worth registering: not a setting ("HASH=sha256"), an option ("--quiet"), a word
 * ("password") or an identifier's name (MAX_RETRIES, user_id_2, camelCase), but 8+ characters of
 * at least two kinds, five of them distinct. */
function secretLike(value: string): boolean {
  if (cpLen(value) < 8 || value.startsWith("-") || matchAt(SETTING, value) !== null || new Set(value).size < 5) {
    return false;
  }
  // Names join words with underscores or capitals; a key of one case and digits does not (an AWS
  // access key, AKIA + 16 upper-case letters and digits, was skipped as a constant's name).
  if (fullMatch(NAME, value) !== null) return false;
  return VALUE_KINDS.filter((k) => k.test(value)).length >= 2;
}

// The characters around a word that are punctuation of the sentence, not of the secret: a part is
// tried as written and without them ("aD6;" is "aD6").
const OPENING = "([{<\"'`";
const CLOSING = ".,;:!?)]}>\"'`";
// Words are looked at twice: between spaces, and also split at any other character that is
// neither a letter nor a digit, so a key written in groups ("AKIA-Z7Q2-LMXW-...", "AKIA_Z7Q2_...")
// is a split secret like one in groups between spaces. A separator that the secret itself has must
// then stand in the text too (`continueSecret`).
const COARSE = new RegExp(`${NOT_S}+`, "gu");
const FINE = /[\p{L}\p{N}]+/gu;
const LEADING_SYMBOLS = /^[^\p{L}\p{N}]*/u;

/** For each word, the `[start, end)` ranges it may stand for, the longest first. */
export type Words = [number, number][][];

const HEAD = 6; // the shortest registered encoding (`encodings`)
const PIECE = 16; // a piece of a long encoding that is a span on its own

/** The words of `text` between spaces, then split at symbols too (`fine`). */
export function* segmentations(text: string): Generator<[Words, boolean]> {
  yield [words(text, COARSE), false];
  yield [words(text, FINE), true];
}

/** For each word of `text`, the ranges it may stand for: as written, without the sentence's
 * punctuation around it, the longest first. */
function words(text: string, word: RegExp): Words {
  const out: Words = [];
  for (const m of text.matchAll(word)) {
    const a = m.index;
    const b = a + m[0].length;
    const a2 = a + m[0].length - lstrip(m[0], OPENING).length;
    const b2 = b - (m[0].length - rstrip(m[0], CLOSING).length);
    const forms = new Map<string, [number, number]>();
    for (const f of [[a, b], [a2, b], [a, b2], [a2, b2]] as [number, number][]) {
      if (f[1] > f[0]) forms.set(`${f[0]},${f[1]}`, f);
    }
    // Python's set of these pairs iterates the later start first among forms of one length.
    out.push([...forms.values()].sort((x, y) => x[0] - x[1] - (y[0] - y[1]) || y[0] - x[0]));
  }
  return out;
}

/**
 * A piece of a secret worth a span: the whole secret, 10+ characters, or one with a digit or
 * symbol; of a passphrase (words between spaces), two of its words at least; and half of a secret
 * or more that is no common word ("sunflow" of "sunflower!1987").
 */
export function isPiece(piece: string, whole: string): boolean {
  if (piece === whole) return true;
  if (whole.includes(" ")) {
    const pieceWords = splitWords(piece);
    const wholeWords = splitWords(whole);
    return pieceWords.length >= 2 && pieceWords.every((w) => wholeWords.includes(w));
  }
  const n = cpLen(piece);
  // A word the secret has whole ("sunflower" of "sunflower!1987") is prose's as well.
  if (n >= 7 && 2 * n >= cpLen(whole) && !(whole.match(/[a-z]+/gu) ?? ([] as string[])).includes(piece)) return true;
  return n >= 10 || /[^a-z]/u.test(piece);
}

/** Options of `HistorySecretDetector`. */
export interface HistorySecretOptions {
  /** The shortest piece of a secret that is a span on its own. */
  minPiece?: number;
  /** The shortest first part of a secret split into words. */
  minPart?: number;
  /** The most characters between two parts of a split secret. */
  splitGap?: number;
}

/** Registered secrets of the history, whole, in pieces and encoded (see the module comment). */
export class HistorySecretDetector implements Detector {
  /** The secrets of `minPiece`+ characters, folded, the longest first. */
  readonly secrets: readonly string[];
  /** PINs shorter than a piece ("4417" of "alarm code 4417"): whole, with separators between the
   * digits ("4 4 1 7", "44-17"), reversed, and in hex; never a part of one. */
  readonly pins: readonly string[];
  readonly minPiece: number;
  readonly minPart: number;
  readonly splitGap: number;
  readonly encoded: Map<string, string>;
  private readonly pinRe: RegExp | null;
  private readonly generic = new Map<string, number>();
  private readonly joined: string;
  private readonly grams = new Set<string>();
  private readonly encodedByHead = new Map<string, string[]>();
  private readonly encodedPrefixes = new Set<string>();
  private readonly encodedHeads = new Set<string>();
  private readonly encodedSpaced = new Set<string>();
  private readonly pieces = new Set<string>();
  private readonly byGram = new Map<string, number[]>();

  constructor(secrets: Iterable<string>, options: HistorySecretOptions = {}) {
    const all = [...secrets];
    const minPiece = options.minPiece ?? 6;
    this.minPiece = minPiece;
    // A part of three characters is as rare in prose as a three-letter word is in a secret; two
    // would hold every "to" of a text whose user has a "to" in a password. The gap between two
    // parts stays well inside the device's look-ahead (32 tokens), so a hold on the first part
    // resolves before the look-ahead runs out.
    this.minPart = options.minPart ?? 3;
    this.splitGap = options.splitGap ?? 48;
    const folded = [...new Set(all.filter((s) => cpLen(s) >= minPiece).map((s) => fold(s).text))].sort(
      (a, b) => cpLen(b) - cpLen(a),
    );
    this.secrets = folded;
    this.pins = [...new Set(all.filter((s) => cpLen(s) < minPiece && isDigit(s) && cpLen(s) >= 4))].sort();
    const sep = `[${S_IN}.\\-_/,:|]{0,2}`;
    this.pinRe =
      this.pins.length > 0
        ? new RegExp(
            this.pins
              .flatMap((pin) => [...new Set([pin, reversed(pin)])])
              .map((p) => `(?<![a-z0-9])${[...p].join(sep)}(?![a-z0-9])`)
              .join("|"),
            "gu",
          )
        : null;
    for (const s of folded) this.generic.set(s, genericPrefix(s));
    this.joined = folded.join("\0");
    // Fixed-length windows in sets, not regex alternations: a history with hundreds of secrets (a
    // pasted lock file's integrity hashes) made one alternation of thousands of branches, tried
    // at every character of every round. A set lookup per position costs the same whatever the
    // number of secrets.
    for (const s of folded) for (let i = 0; i + minPiece <= s.length; i++) this.grams.add(s.slice(i, i + minPiece));
    this.encoded = encodings(new Map(all.map((s) => [s, SECRET])));
    for (const pin of this.pins) if (!this.encoded.has(utf8Hex(pin))) this.encoded.set(utf8Hex(pin), SECRET);
    // Every encoding is 6+ characters (`encodings`): indexed by its first six.
    for (const e of [...this.encoded.keys()].sort((a, b) => cpLen(b) - cpLen(a))) {
      const head = e.slice(0, HEAD);
      const list = this.encodedByHead.get(head);
      if (list === undefined) this.encodedByHead.set(head, [e]);
      else list.push(e);
    }
    for (const e of this.encoded.keys()) {
      for (let n = Math.min(4, e.length); n < e.length; n++) this.encodedPrefixes.add(e.slice(0, n));
      // A word that begins an encoding is held from two characters, as a piece of a secret is
      // ("re" of "reicalg norffas", a passphrase reversed); inside a word, from four.
      for (let n = 2; n < Math.min(4, e.length); n++) this.encodedHeads.add(e.slice(0, n));
      if (e.includes(" ")) for (let n = e.indexOf(" ") + 1; n < e.length; n++) this.encodedSpaced.add(e.slice(0, n));
      // A long encoding the look-ahead cannot hold whole reaches the guard in pieces: any 16
      // characters of one are a span too.
      for (let i = 0; i + PIECE <= e.length; i += 2) this.pieces.add(e.slice(i, i + PIECE));
    }
    // The secrets each `minPart`-gram occurs in, so a split part is tried against the few secrets
    // that can go on after it, not all of them.
    folded.forEach((secret, k) => {
      const grams = new Set<string>();
      for (let i = 0; i + this.minPart <= secret.length; i++) grams.add(secret.slice(i, i + this.minPart));
      for (const g of [...grams].sort(byCodePoint)) {
        const list = this.byGram.get(g);
        if (list === undefined) this.byGram.set(g, [k]);
        else list.push(k);
      }
    });
  }

  static fromHistory(history: Iterable<string>): HistorySecretDetector {
    return new HistorySecretDetector(historySecrets(history));
  }

  /** Python's `len()`: how many secrets and PINs are registered. */
  get size(): number {
    return this.secrets.length + this.pins.length;
  }

  /** Some (secret, end offset) of `piece` reaches 3+ characters past the secret's generic prefix. */
  private pastGeneric(piece: string): boolean {
    for (const secret of this.secrets) {
      for (let i = secret.indexOf(piece); i >= 0; i = secret.indexOf(piece, i + 1)) {
        if (i + piece.length - (this.generic.get(secret) ?? 0) >= 3) return true;
      }
    }
    return false;
  }

  private inSecret(piece: string): boolean {
    return !piece.includes("\0") && this.joined.includes(piece);
  }

  find(text: string): Span[] {
    if (this.secrets.length === 0 && this.pins.length === 0) return [];
    const f = fold(text);
    const t = f.text;
    const out: Span[] = [];
    if (this.pinRe !== null) {
      for (const m of t.matchAll(this.pinRe)) out.push(new Span(...f.span(m.index, m.index + m[0].length), SECRET));
    }
    let end = 0;
    const n = this.minPiece;
    for (let start = 0; start + n <= t.length; start++) {
      if (start < end || !this.grams.has(t.slice(start, start + n))) continue;
      let a = start;
      let b = a + n;
      while (b < t.length && this.inSecret(t.slice(a, b + 1))) b++;
      while (a > 0 && this.inSecret(t.slice(a - 1, b))) a--;
      let piece = t.slice(a, b);
      const whole = this.secrets.find((s) => s.includes(piece)) ?? piece;
      if (whole.includes(" ") && piece !== whole) {
        // A passphrase's piece: whole words only.
        // A partial first word, a partial last word.
        if (a > 0 && isAlnum(t[a - 1]!) && piece.includes(" ")) a += piece.indexOf(" ") + 1;
        if (b < t.length && isAlnum(t[b]!) && t.slice(a, b).includes(" ")) b = a + t.slice(a, b).lastIndexOf(" ");
        piece = strip(t.slice(a, b));
      }
      if (b > a && isPiece(piece, whole) && this.pastGeneric(piece)) {
        out.push(new Span(...f.span(a, b), SECRET));
        end = b;
      }
    }
    for (let a = 0; a + HEAD <= t.length; a++) {
      for (const e of this.encodedByHead.get(t.slice(a, a + HEAD)) ?? []) {
        if (t.startsWith(e, a)) {
          out.push(new Span(...f.span(...widenEncoded(t, a, a + e.length)), SECRET));
          break;
        }
      }
      if (this.pieces.has(t.slice(a, a + PIECE))) {
        out.push(new Span(...f.span(...widenEncoded(t, a, a + PIECE)), SECRET));
      }
    }
    for (const [a, b] of this.splitParts(t)) out.push(new Span(...f.span(a, b), SECRET));
    return mergeSpans(out);
  }

  /** Each (secret, offset) where a secret goes on after `part` as its first part: its start, or
   * anywhere in it for a part with a digit or a symbol ("ran" of "granite-..." is a word). */
  private *starts(part: string): Generator<[string, number]> {
    const anywhere = /[^a-z]/u.test(part);
    for (const k of this.byGram.get(part.slice(0, this.minPart)) ?? []) {
      const secret = this.secrets[k]!;
      let i = anywhere ? secret.indexOf(part) : secret.startsWith(part) ? 0 : -1;
      while (i >= 0) {
        if (i + part.length < secret.length) yield [secret, i + part.length];
        i = anywhere ? secret.indexOf(part, i + 1) : -1;
      }
    }
  }

  /** `t[a:b]` (a form of `words[i]`) may be the first part of a secret whose rest is not all
   * written yet, and is recent enough for the rest to follow. */
  private openSplit(t: string, words: Words, i: number, a: number, b: number, fine: boolean): boolean {
    if (b - a < this.minPart || t.length - b > this.splitGap) return false;
    for (const [secret, pos] of this.starts(t.slice(a, b))) {
      if (pos <= (this.generic.get(secret) ?? 0)) continue; // "https", "github" of a generic prefix: no secret yet
      const parts = this.continueSecret(t, words, i + 1, b, secret, pos, fine);
      if (pos + parts.reduce((n, [c, d]) => n + d - c, 0) < secret.length) return true;
    }
    return false;
  }

  /** The parts of secrets written in several words with text between (see the module comment). */
  private splitParts(t: string): [number, number][] {
    const out: [number, number][] = [];
    for (const [words, fine] of segmentations(t)) {
      words.forEach((forms, i) => {
        for (const [a, b] of forms) {
          if (b - a < this.minPart) continue;
          for (const [secret, pos] of this.starts(t.slice(a, b))) {
            const parts = this.continueSecret(t, words, i + 1, b, secret, pos, fine);
            const whole = t.slice(a, b) + parts.map(([c, d]) => t.slice(c, d)).join("");
            const reach = pos + parts.reduce((n, [c, d]) => n + d - c, 0);
            if (
              parts.length > 0 &&
              whole.length >= this.minPiece &&
              isPiece(whole, secret.replaceAll(" ", "")) &&
              reach - (this.generic.get(secret) ?? 0) >= 3
            ) {
              out.push([a, b], ...parts);
            }
          }
        }
      });
    }
    return out;
  }

  /**
   * The words from `words[i]` on (within `splitGap` characters of each other) that go on with
   * `secret` from `pos`, in order, until it is complete.
   *
   * Between `fine` words (letters and digits only), a character of the secret's own that is
   * neither must stand in the text too, just after the part before or just before the word:
   * "Granite-" or "-Plum" go on with "granite-plum", "Granite; plum" does not.
   */
  private continueSecret(
    t: string,
    words: Words,
    from: number,
    end: number,
    secret: string,
    pos: number,
    fine: boolean,
  ): [number, number][] {
    const parts: [number, number][] = [];
    for (let i = from; i < words.length && pos < secret.length && words[i]![0]![0] - end <= this.splitGap; i++) {
      const rest = secret.slice(pos);
      const sep = fine ? LEADING_SYMBOLS.exec(rest)![0] : "";
      const afterPart = t.slice(end, end + sep.length) === sep;
      // The longest form the secret goes on with. One character is a part too where the secret
      // goes on with it ("lantern p; ... rism cobalt"): the parts together must still make a
      // piece (`splitParts`).
      const hit = words[i]!.find(
        ([a, b]) =>
          (afterPart || (a >= sep.length && t.slice(a - sep.length, a) === sep)) &&
          rest.slice(sep.length).startsWith(t.slice(a, b)),
      );
      if (hit !== undefined) {
        parts.push(hit);
        pos += sep.length + hit[1] - hit[0];
        end = hit[1];
      }
    }
    return parts;
  }

  hazard(text: string): Span | null {
    if (this.secrets.length === 0 && this.pins.length === 0) return null;
    const offset = tailStart(text, 96);
    const f = fold(text.slice(offset));
    const t = f.text;
    let best: number | null = null;
    // A PIN's first digits (or its reversed form's), with separators, may still become it.
    const run = PIN_RUN.exec(t);
    if (run !== null && this.pins.length > 0) {
      const digits = run[0].replace(NOT_DIGIT, "");
      if (this.pins.some((p) => p.startsWith(digits) || reversed(p).startsWith(digits))) best = run.index;
    }
    // The longest suffix that is still a piece of a secret (two characters or more). A suffix of
    // a piece is a piece too, so the longest one is found by bisection (a few substring searches
    // instead of one per position).
    let lo = Math.max(0, t.length - 80);
    let hi = t.length - 1;
    if (lo < hi && this.inSecret(t.slice(hi - 1))) {
      hi -= 1; // t[hi:] is a piece (two characters or more); find the smallest such start
      while (lo < hi) {
        const mid = Math.floor((lo + hi) / 2);
        if (this.inSecret(t.slice(mid))) hi = mid;
        else lo = mid + 1;
      }
      best = hi;
    }
    // A recent word that is a piece of a secret: the rest may follow after a few words.
    for (const [words, fine] of segmentations(t)) {
      for (let i = 0; i < words.length; i++) {
        const part = words[i]!.find(([a, b]) => this.openSplit(t, words, i, a, b, fine));
        if (part !== undefined) {
          best = best === null ? part[0] : Math.min(best, part[0]);
          break;
        }
      }
    }
    // Any trailing run without spaces: a secret reversed or in ROT13 keeps its symbols
    // ("dh4aghz!9rjy"), so a run of encoding characters alone let it go at the "!".
    const m = TRAILING_RUN.exec(t);
    if (m !== null && this.encodedPrefixes.size > 0) {
      const word = m[0];
      for (let i = 0; i < word.length; i++) {
        if (this.encodedPrefixes.has(word.slice(i)) || (i === 0 && this.encodedHeads.has(word))) {
          const start = m.index + i;
          best = best === null ? start : Math.min(best, start);
          break;
        }
      }
    }
    // A passphrase reversed or in ROT13 has spaces: the words since one of the last few word
    // starts may together begin its encoding ("reicalg nor" of "reicalg norffas elbbep").
    if (this.encodedSpaced.size > 0) {
      for (const w of [...t.matchAll(WORD_START)].slice(-8)) {
        if (w.index < (best ?? t.length) && this.encodedSpaced.has(t.slice(w.index))) {
          best = w.index;
          break;
        }
      }
    }
    return best === null ? null : new Span(offset + f.rawStart(best), text.length, SECRET);
  }

  forPrompt(): Detector {
    return this;
  }
}

const PIN_RUN = new RegExp(`(?<![a-z0-9])${D}(?:[${S_IN}.\\-_/,:|]{0,2}${D}){0,7}[${S_IN}.\\-_/,:|]{0,2}$`, "u");
const NOT_DIGIT = /\P{Nd}/gu;
const TRAILING_RUN = new RegExp(`${NOT_S}+$`, "u");
const WORD_START = new RegExp(`(?<![^${S_IN}"'\\x60(\\[{<])[^${S_IN}"'\\x60(\\[{<]`, "gu");
