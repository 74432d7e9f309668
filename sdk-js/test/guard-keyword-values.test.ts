/**
 * The keyword-value, shape and seed-phrase recognizers (src/guard/keyword_values.ts, shapes.ts,
 * seed_phrase.ts, ports of privacy/recognizers.py). Every expected span and hazard below is what
 * the Python recognizer returns for the same text (its offsets are code points; these texts have
 * none past U+FFFF, so they are the JavaScript indices too).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { KeywordValueRecognizer, passwordOk, pinOk, strongPasswordOk } from "../src/guard/keyword_values.js";
import { SeedPhraseRecognizer } from "../src/guard/seed_phrase.js";
import { ShapeRecognizer } from "../src/guard/shapes.js";
import { checkDetector as check } from "./guard-check.js";
import { stdnumValid } from "../src/guard/stdnum_checks.js";

test("a keyword announces a password, a PIN, an ID, a birth date, bank details", () => {
  check(new KeywordValueRecognizer(), [
    ["the wifi password is Tr0ub4dor&3.", [[21, 32, "secret"]], [21, 33, "secret"]],
    ["login with password Chelsea2000!", [[20, 32, "secret"]], [20, 32, "secret"]],
    ["garage pin 4383", [[11, 15, "secret"]], [11, 15, "secret"]],
    ["pin: four seven one nine", [[5, 24, "secret"]], [5, 24, "secret"]],
    ["ｐｉｎ：４７１９", [[4, 8, "secret"]], [4, 8, "secret"]],
    ["パスワードは Xy9#kq2!", [[7, 15, "secret"]], [7, 15, "secret"]],
    ["my CPF é 111.444.777-35", [[9, 23, "national-id"]], [9, 23, "national-id"]],
    ["Steuer-ID ist 86 095 742 719", [[14, 28, "national-id"]], [14, 28, "national-id"]],
    ["born 25 July 2004", [[5, 17, "national-id"]], [5, 17, "national-id"]],
    ["sort code 66-04-87, account 64758291", [[10, 36, "iban"]], [10, 36, "iban"]],
    ["routing 021000021", [[8, 17, "iban"]], [8, 17, "iban"]],
  ]);
});

test("prose, sizes, sentinel dates and cloud accounts are no values; a value being written is held", () => {
  check(new KeywordValueRecognizer(), [
    ["the password is required", [], [16, 24, "secret"]],
    ["my password is hunt", [], [15, 19, "secret"]],
    ["private key is 2048 bits", [], null],
    ["password e-mailed to you", [], null],
    ["dob 1999-12-31 in fixture", [], null],
    ["aws account: 123456789012", [], [13, 25, "iban"]],
    ["sort code 66-0", [], [10, 14, "iban"]],
  ]);
});

test("the validators history_secrets.ts shares", () => {
  assert.equal(passwordOk("Tr0ub4dor&3"), true);
  assert.equal(passwordOk("hunter2"), false);
  assert.equal(strongPasswordOk("Chelsea2000!"), true);
  assert.equal(strongPasswordOk("reset2"), false);
  assert.equal(pinOk("4383"), true);
  assert.equal(pinOk("1111"), false);
});

test("identifiers with a shape of their own", () => {
  check(new ShapeRecognizer(), [
    ["Ping me at 52.5200° N, 13.4050° E tonight", [[11, 33, "address"]], null],
    ["mac 3c:22:fb:9a:10:4e on the switch", [[4, 21, "ip"]], null],
    ["mac aa:bb:cc:dd:ee:ff", [], [4, 21, "secret"]],
    ["the host 192[.]168[.]4[.]20 again", [[9, 27, "ip"]], null],
    ["order 4155550199", [], null],
    ["PO Box 1234, Springfield", [[0, 24, "address"]], null],
    ["seed at Quayside Street 196, Unit 8B", [[8, 36, "address"]], null],
    ["IBAN DE89.3704.0044.0532.0130.00", [[5, 32, "iban"]], [5, 32, "secret"]],
    ["2FA secret: JBSW Y3DP EHPK 3PXP", [[12, 31, "secret"]], [12, 31, "secret"]],
    ["2FA: JBSW Y3", [], [5, 12, "secret"]],
    ["https://hooks.sl", [], [0, 16, "secret"]],
    ["1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", [[0, 34, "secret"]], null],
    ["1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNb", [], null],
    ["CPF 111.444.777-35", [[4, 18, "national-id"]], null],
    ["GPS 26", [], [4, 6, "address"]],
    ["I live at Qu", [], [10, 12, "secret"]],
  ]);
});

test("a long base32 run after a 2FA keyword is judged at once", () => {
  // The Python's pattern tries every split of the run (minutes for this text) to answer null.
  const text = "2FA: " + "KBL5AG2G5S7TOL7CUP3D".repeat(2) + " ok";
  const started = Date.now();
  check(new ShapeRecognizer(), [[text, [[5, 45, "secret"]], null]]);
  assert.ok(Date.now() - started < 1000);
});

test("wallet seed phrases, and their first words while written", () => {
  check(new SeedPhraseRecognizer(), [
    [
      "abandon ability able about above absent absorb abstract absurd abuse access accident",
      [[0, 84, "secret"]],
      [0, 84, "secret"],
    ],
    ["we fix now", [], null],
    ["abandon ability able", [], [0, 20, "secret"]],
    ["recovery words: zoo", [], [16, 19, "secret"]],
    ["abandon, abil", [], [0, 13, "secret"]],
  ]);
});

test("python-stdnum's checks where stdnum-js judges otherwise", () => {
  // Full-width digits are digits to python-stdnum's clean(); Arabic-Indic ones are not.
  assert.equal(stdnumValid("de.idnr", "97 921 438 ６０5"), true);
  assert.equal(stdnumValid("de.idnr", "97 921 438 ٦٠5"), false);
  // A Swedish coordination number (day + 60) is not a personnummer to python-stdnum.
  assert.equal(stdnumValid("se.personnummer", "590675-2000"), false);
  assert.equal(stdnumValid("us.ssn", "734-84-0000"), false);
});
