/**
 * The personal-data, context-identifier and special-category detectors (src/guard/pii.ts,
 * context_ids.ts, special.ts). Every expected span below is the Python detector's output on the
 * same text (privacy/pii.py, context_ids.py, special.py); the conformance replay checks the rest.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { BirthDateRecognizer, LicencePlateRecognizer } from "../src/guard/context_ids.js";
import { PiiDetector, ibanLength } from "../src/guard/pii.js";
import { SpecialCategoryRecognizer } from "../src/guard/special.js";
import type { Detector } from "../src/guard/spans.js";

type Found = [number, number, string];

const find = (d: Detector, text: string): Found[] => d.find(text).map((s) => [s.start, s.end, s.kind]);
const hazard = (d: Detector, text: string): Found | null => {
  const s = d.hazard(text);
  return s === null ? null : [s.start, s.end, s.kind];
};

test("PiiDetector finds what the Python detector finds", () => {
  const d = new PiiDetector();
  const cases: [string, Found[]][] = [
    ["Mail jane dot doe at example dot com or call +49 30 1234567.", [[5, 36, "email"], [45, 59, "phone"]]],
    [
      "Card 4111 1111 1111 1111, host 192.168.1.20 and fe80::1%eth0",
      [[5, 24, "card"], [31, 43, "ip"], [48, 60, "ip"]],
    ],
    ["pay DE89 3704 0044 0532 0130 00 before", [[4, 31, "iban"]]],
    ["I live at 221b Baker Street, London NW1 6XE now", [[10, 47, "address"]]],
    ["clone https://jane:s3cr@t@git.example.com/x", [[6, 41, "url-credentials"]]],
    ["Ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ", [[0, 16, "email"]]],
    // A remote, a version, a build artifact and loopback are none.
    ["see git@github.com:owner/repo.git, Git 1.8.0.3, icon@2x.png, ::1", []],
  ];
  for (const [text, spans] of cases) assert.deepEqual(find(d, text), spans, text);
  assert.equal(ibanLength("es91 2100 0418 4502 0005 1332 before"), 29);
});

test("PiiDetector holds what could still become a match, local parts only when asked", () => {
  const on = new PiiDetector();
  const off = new PiiDetector({ holdLocalParts: false });
  const cases: [string, Found | null, Found | null][] = [
    ["write to jane.do", [9, 16, "email"], [9, 16, "email"]],
    ["write to loop", [9, 13, "email"], null],
    ["call +1 (415", [5, 12, "phone"], [5, 12, "phone"]],
    ["moved to Heren", [9, 14, "address"], null],
    ["the hash 8e5e7e5a1234567890abcd", null, null],
  ];
  for (const [text, held, heldOff] of cases) {
    assert.deepEqual(hazard(on, text), held, text);
    assert.deepEqual(hazard(off, text), heldOff, text);
  }
  assert.throws(() => new PiiDetector({ kinds: ["email", "fax"] }), /unknown personal-data kind\(s\): fax/);
});

test("BirthDateRecognizer and LicencePlateRecognizer need their context", () => {
  const births = new BirthDateRecognizer({ today: new Date(2025, 5, 1) });
  assert.deepEqual(find(births, "Aino Virtanen (02.06.1979) joined"), [[15, 25, "national-id"]]);
  assert.deepEqual(find(births, "Jonas Berg, 13 May 1997"), [[12, 23, "national-id"]]);
  assert.deepEqual(find(births, "Django 5.0 (2023-12-04)"), []);
  assert.deepEqual(find(births, "On Fri, 18 Nov 2005, Jane wrote"), []);
  assert.deepEqual(hazard(births, "Jonas Berg, 13 Ma"), [12, 17, "national-id"]);
  assert.equal(births.hazard("Mira Holt, Oslo"), null);

  const plates = new LicencePlateRecognizer();
  assert.deepEqual(find(plates, "my car is AB12 CDE."), [[10, 18, "national-id"]]);
  assert.deepEqual(find(plates, "Kennzeichen M-AB 1234"), [[12, 21, "national-id"]]);
  assert.deepEqual(find(plates, "ticket AB12 CDE"), []);
  assert.deepEqual(hazard(plates, "the van with plate KR 23"), [19, 24, "national-id"]);
  assert.equal(plates.hazard("the van with plate KR 23390 XYZ1"), null);
});

test("SpecialCategoryRecognizer finds terms in prose, not in code, and holds their prefixes", () => {
  const d = new SpecialCategoryRecognizer();
  const cases: [string, Found[]][] = [
    ["She was diagnosed with type 2 diabetes last year", [[23, 38, "special-category"]]],
    ["he has cancer; cancer research", [[7, 13, "special-category"]]],
    ["takes 150 mg of quetiapine daily", [[6, 32, "special-category"]]],
    ["a member of the Green Party since 2010", [[2, 27, "special-category"]]],
    ["12 weeks pregnant", [[0, 17, "special-category"]]],
    ["is_pregnant() and /healthz", []],
  ];
  for (const [text, spans] of cases) assert.deepEqual(find(d, text), spans, text);
  const end = new SpecialCategoryRecognizer({ holdPrefixes: false });
  assert.deepEqual(hazard(d, "prescribed Met"), [11, 14, "special-category"]);
  assert.deepEqual(hazard(d, "she is 12 wee"), [7, 13, "special-category"]);
  assert.equal(d.hazard("the parser suffers from"), null);
  assert.equal(end.hazard("prescribed Met"), null);
});
