/**
 * The guard's normal form (src/guard/normalize.ts) and the registered strings' forms
 * (src/guard/registered.ts). Every expected value below is the Python guard's output
 * (privacy/normalize.py, privacy/registered.py) for the same input, with its code-point offsets
 * turned into UTF-16 indices where the text has characters past U+FFFF.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { DIGIT_WORD_PREFIXES, DIGIT_WORDS, fold, foldString, spelledTail } from "../src/guard/normalize.js";
import {
  base64Fragments,
  encodings,
  nameHandles,
  nameVariants,
  secretCores,
  soundKey,
  transliterate,
  transliterations,
  unambiguousFirstNames,
  unambiguousSurnames,
  widenEncoded,
} from "../src/guard/registered.js";
import { utf8 } from "../src/bytes.js";

const sorted = (s: Iterable<string>): string[] => [...s].sort();
const range = (a: number, b: number): number[] => Array.from({ length: b - a }, (_, i) => a + i);

test("fold: full width, look-alikes and invisible characters read as plain text", () => {
  const wide = fold("ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ");
  assert.equal(wide.text, "jane@example.com");
  assert.deepEqual(wide.span(0, 16), [0, 16]);
  const hidden = fold("jаne\u200b@exаmple.com"); // Cyrillic "а", a zero-width space
  assert.equal(hidden.text, "jane@example.com");
  assert.deepEqual(hidden.starts, [0, 1, 2, 3, ...range(5, 17)]);
  assert.deepEqual(hidden.span(4, 5), [5, 6]);
  assert.deepEqual(hidden.span(16, 16), [17, 17]);
  assert.equal(foldString("PIN ٤٨٢٩ ४८२९"), "pin 4829 4829");
  // One raw character, two folded ones: both map back to it.
  const ligature = fold("ﬁne");
  assert.equal(ligature.text, "fine");
  assert.deepEqual([ligature.starts, ligature.ends], [[0, 0, 1, 2], [1, 1, 2, 3]]);
});

test("fold: raw offsets are UTF-16 indices past U+FFFF", () => {
  const f = fold("𝐣𝐚𝐧𝐞 😀 ok");
  assert.equal(f.text, "jane 😀 ok");
  assert.deepEqual(f.starts, [0, 2, 4, 6, 8, 9, 9, 11, 12, 13]);
  assert.deepEqual(f.span(0, 4), [0, 8]);
  assert.equal(f.rawStart(7), 11);
  assert.equal(f.rawStart(10), 14);
});

test("fold: spaced-out letters are joined, number words and the spelling alphabet read", () => {
  const spaced = fold("j o h n   d o e");
  assert.equal(spaced.text, "john doe");
  assert.deepEqual(spaced.starts, [0, 2, 4, 6, 9, 10, 12, 14]);
  const pin = fold("six six zero four");
  assert.equal(pin.text, "6 6 0 4");
  assert.deepEqual(pin.span(0, 1), [0, 3]);
  assert.equal(foldString("cinq zéro neuf"), "5 0 9");
  assert.equal(foldString("Test User One"), "test user one");
  assert.equal(foldString("alpha bravo seven x-ray"), "a b 7 x");
  assert.ok(DIGIT_WORDS.has("sechs") && DIGIT_WORD_PREFIXES.has("neu") && !DIGIT_WORD_PREFIXES.has("neuf"));
});

test("spelledTail: a run of spelling-alphabet words at the end", () => {
  assert.equal(spelledTail("my code is alpha bravo se"), 11);
  assert.equal(spelledTail("alpha"), 0);
  assert.equal(spelledTail("echo one two"), 0);
  assert.equal(spelledTail("delta airlines"), null);
  assert.equal(spelledTail("alpha bravo qz"), null);
});

test("registered: names, handles and unambiguous parts", () => {
  assert.deepEqual(sorted(nameVariants("Jane Q. Doe")), [
    "Doe Jane", "Doe, J.", "Doe, Jane", "Doe, Jane Q.", "Doe.Jane", "Doe_Jane", "J. Doe", "J.Doe",
    "Jane Doe", "Jane Q. Doe", "Jane-Doe", "Jane.Doe", "JaneDoe", "Jane_Doe",
  ]);
  // "Frank" is a word: not joined to its surname ("franklin").
  assert.ok(!nameVariants("Frank Lin").has("FrankLin"));
  assert.deepEqual(sorted(nameHandles("Torvald Vanterpool")), ["TVanterpool", "Torvald.V", "TorvaldV"]);
  const names = ["Mark Black", "Torvald Vanterpool", "Torvald Smith", "Henrike Radcliffe"];
  assert.deepEqual(sorted(unambiguousFirstNames(names)), ["Henrike"]);
  assert.deepEqual(sorted(unambiguousSurnames(names.filter((n) => n !== "Torvald Smith"))), ["Radcliffe", "Vanterpool"]);
});

test("registered: secrets and their encodings", () => {
  assert.deepEqual(sorted(secretCores("my PIN is 482913")), ["482913"]);
  assert.deepEqual(sorted(secretCores("no digits")), ["no digits"]);
  assert.deepEqual(sorted(base64Fragments(utf8.encode("482913"))), ["0ODI5MT", "NDgyOTEz", "Q4MjkxM"]);
  assert.deepEqual(widenEncoded("x agvsbg8= y", 3, 6), [2, 10]); // folded text: lower case
  const e = encodings([["my PIN is 482913", "canary"]]);
  assert.equal(e.size, 12);
  assert.equal(e.get("319284 si nip ym"), "canary");
  assert.equal(e.get("6d792050494e20697320343832393133"), "canary");
  assert.equal(encodings([["12345", "canary"]]).size, 0);
});

test("registered: other scripts romanized", () => {
  assert.deepEqual(sorted(transliterations("Дмитрий Соколов")), [
    "Dmitri Sokolov", "Dmitrii Sokolov", "Dmitriy Sokolov", "Dmitry Sokolov",
  ]);
  assert.deepEqual(sorted(transliterations("王秀英")), [
    "Wang Xiu Ying", "Wang Xiu-ying", "Wang Xiuying", "WangXiuYing", "Xiu-ying Wang", "Xiuying Wang",
  ]);
  assert.ok(transliterations("김서연").has("Kim Seo-yeon"));
  assert.equal(transliterations("Ştefan").size, 0);
  assert.equal(transliterations("خالد").size, 0);
  assert.deepEqual([transliterate("Алиса"), transliterate("Μάρκος"), transliterate("Aлиса")], ["alisa", "markos", ""]);
  assert.deepEqual(["alice", "alisa", "dzhon", "John"].map(soundKey), ["als", "als", "jn", "jn"]);
});
