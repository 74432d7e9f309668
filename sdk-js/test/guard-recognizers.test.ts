/**
 * The recognizers of src/guard/recognizers.ts (port of privacy/recognizers.py, phones to wrapped
 * emails). Every expected span and hazard below is what the Python recognizer returns for the same
 * text (offsets are the same: the texts are BMP-only).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  CardRecognizer,
  NationalIdRecognizer,
  PhoneRecognizer,
  SecretRecognizer,
  WrappedEmailRecognizer,
  looksRandom,
  namesASecret,
  secretValues,
  unwrapped,
} from "../src/guard/recognizers.js";
import { checkDetector as check } from "./guard-check.js";

test("phones: a country code by libphonenumber, national groups, the number still being written", () => {
  check(new PhoneRecognizer(), [
    ["Call me on +44 20 7946 0958 tomorrow", [[11, 27, "phone"]], null],
    ["ring 0044 20 7946 0958", [[5, 22, "phone"]], [5, 22, "phone"]],
    ["reach me at (+44) 20 79", [[12, 23, "phone"]], [12, 23, "phone"]],
    ["my mobile: 98765 43210.", [[11, 22, "phone"]], null],
    ["call +44 20\n7946 0958", [[5, 21, "phone"]], [5, 21, "phone"]],
    ["my number is nine", [], [13, 17, "phone"]],
    ["build 1234 5678 passed", [], null],
    ["ten tries 1 2 3 4 5 6 7 8 9 0", [], [10, 29, "phone"]],
  ]);
});

test("cards: Luhn and the issuer prefix, one kind of separator", () => {
  check(new CardRecognizer(), [
    ["paid with 4111 1111 1111 1111 yesterday", [[10, 29, "card"]], null],
    ["4111.1111.1111.1111", [[0, 19, "card"]], null],
    ["4111\n1111 1111 1111", [[0, 19, "card"]], null],
    ["4111 1111 1111 1112", [], null],
    ["4111-1111 1111-1111", [], null],
  ]);
});

test("national identifiers: stdnum's checksums and the NINO's shape", () => {
  check(new NationalIdRecognizer(), [
    ["SSN 536-22-1234", [[4, 15, "national-id"]], null],
    ["SSN 078-05-1120", [], null],
    ["NI number AB 12 34 56 C", [[10, 23, "national-id"]], null],
    ["dni 12345678Z", [[4, 13, "national-id"]], null],
    ["BSN 111222333", [[4, 13, "national-id"]], null],
    ["SIN 046 454 286", [], null],
    ["my nino is ab 12 3", [], [11, 18, "national-id"]],
    ["version 123 456 789", [], null],
  ]);
});

test("secrets: vendor keys, keyword values, JWTs, private keys, random words", () => {
  check(new SecretRecognizer(), [
    ["key AKIAIOSFODNN7EXAMPLE here", [[4, 24, "secret"]], null],
    ["DB_PASSWORD=hunter2!x", [[12, 21, "secret"]], [12, 21, "secret"]],
    ["password: required.", [], [10, 19, "secret"]],
    ["TOKEN_URL=https://x.example/aBc9", [], null],
    ['api_key = "ql', [], [11, 13, "secret"]],
    ["-----BEGIN RSA PRIVATE KEY-----\nMIIEow", [[32, 38, "secret"]], [32, 38, "secret"]],
    ["jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc", [[4, 44, "secret"]], [4, 44, "secret"]],
    ["commit 3f9a2c1d4e5b6a7980716253443a2b1c0d9e8f7a", [], null],
    // detect-secrets' GitHub pattern captures the prefix: the first group that matched is the span.
    ["ghp_" + "a".repeat(36), [[0, 3, "secret"]], [0, 40, "secret"]],
    ["AWS_REGION=eu-west-1 and key=", [], null],
    ["token Qm9vZ1l0b2tlbjEyMzQ1Njc4\nOTBhYmNkZWY=", [[6, 43, "secret"]], [6, 43, "secret"]],
  ]);
  assert.deepEqual(secretValues("DB_PASSWORD=hunter2!x and eyJhbGciOiJIUzI1NiJ9"), [
    [26, 46],
    [12, 21],
    [26, 46],
  ]);
  assert.equal(namesASecret("TOKEN_URL=x", 0), false);
  assert.equal(namesASecret("GITHUB_TOKEN=x", 0), true);
});

test("looksRandom: mixed classes, high entropy, not hex, not words", () => {
  assert.equal(looksRandom("x7Gq2LmN9pRt4VwZ8bYc"), true);
  assert.equal(looksRandom("aBcDeFgH12345678"), true);
  assert.equal(looksRandom("ThisIsAVeryLongIdentifier1"), false);
  assert.equal(looksRandom("0x9E3779B97F4A7C15abcd"), false);
});

test("wrapped emails and the unwrapped view", () => {
  check(new WrappedEmailRecognizer(), [
    ["mail jane.doe@exam\nple.com now", [[5, 26, "email"]], [27, 30, "email"]],
    ["mail jane.doe@exam\nple.co", [[5, 25, "email"]], [5, 25, "email"]],
    ["mail jane.doe@example.com", [], null],
  ]);
  const view = unwrapped("abc\ndef\n");
  assert.equal(view.text, "abcdef");
  assert.deepEqual(view.span(2, 5), [2, 6]);
  assert.equal(view.raw(6), 8);
});
