/**
 * The registered-string detectors (src/guard/canaries.ts, src/guard/history_secrets.ts): every
 * expected span below is the Python detector's output for the same input (privacy/canaries.py,
 * privacy/history_secrets.py), as [start, end, kind].
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { CanaryDetector, identitiesFromTrailers, splitTrailers } from "../src/guard/canaries.js";
import { HistorySecretDetector, genericPrefix, isPiece, segmentations } from "../src/guard/history_secrets.js";
import type { Span } from "../src/guard/spans.js";

const spans = (found: Span[]): [number, number, string][] => found.map((s) => [s.start, s.end, s.kind]);
const hazard = (h: Span | null): [number, number, string] | null => (h === null ? null : [h.start, h.end, h.kind]);

test("a registered name, email and canary in the forms they take on the way out", () => {
  const d = new CanaryDetector(
    new Map([
      ["Jane Doe", "name"],
      ["jane.doe@example.com", "email"],
      ["my PIN is 482913", "canary"],
    ]),
    { commonWords: ["will"] },
  );
  assert.deepEqual([...d.cores].sort(), ["319284", "482913"]);
  const finds: [string, [number, number, string][]][] = [
    [
      "Contact Doe, Jane at jane.doe@example.com",
      [
        [8, 17, "name"],
        [21, 41, "email"],
      ],
    ],
    ["the pin: 4 8 2 9 1 3.", [[9, 20, "canary"]]],
    ["hex 343832393133 here", [[4, 16, "canary"]]],
    [
      "Reviewed by Doe's team; JANE agreed",
      [
        [12, 17, "name"],
        [24, 28, "name"],
      ],
    ],
    ["the jane doe", [[4, 12, "name"]]],
    ["a janitor, a doe and 4829 13", [[21, 28, "canary"]]],
  ];
  for (const [text, want] of finds) assert.deepEqual(spans(d.find(text)), want, text);
  const hazards: [string, [number, number, string] | null][] = [
    ["Signed-off-by: Jane D", [15, 21, "name"]],
    ["the pin is 48-2", [11, 15, "canary"]],
    ["Reviewed by Jan", [12, 15, "name"]],
    ["so jan", [3, 6, "name"]],
    ["nothing here", null],
  ];
  for (const [text, want] of hazards) assert.deepEqual(hazard(d.hazard(text)), want, text);
});

test("a name registered in Cyrillic, written in Latin letters or its own", () => {
  const d = new CanaryDetector({ "Алексей Морозов": "name" });
  assert.deepEqual(spans(d.find("Paired with Aleksey Morozov today")), [[12, 27, "name"]]);
  assert.deepEqual(spans(d.find("Paired with Алексей Морозов")), [[12, 27, "name"]]);
  assert.deepEqual(spans(d.find("Morozov, Alexei")), [[0, 7, "name"]]);
  assert.deepEqual(hazard(d.hazard("Thanks to Aleks")), [10, 15, "name"]);
  assert.deepEqual(hazard(d.hazard("Thanks to Алекс")), [10, 15, "name"]);
  assert.equal(d.hazard("Thanks to \ufffd"), null);
});

test("identities from commit trailers", () => {
  const ids = identitiesFromTrailers([
    "Signed-off-by: Jane Doe <jane@example.com>",
    "Reviewed-by: Oluwaseun <o@ex.org>",
    "Tested-by: Bot <b@ex.org>",
    "Fixes: 1c2d (net: x)",
  ]);
  assert.deepEqual(Object.fromEntries(ids), {
    "jane@example.com": "email",
    "Jane Doe": "name",
    "o@ex.org": "email",
    Oluwaseun: "name",
    "b@ex.org": "email",
  });
  assert.deepEqual(
    splitTrailers("Fix the parser\n\nMore text.\n\nSigned-off-by: Jane Doe <jane@example.com>\nCc: Max Mustermann <m@ex.org>\n"),
    ["Fix the parser\n\nMore text.", ["Signed-off-by: Jane Doe <jane@example.com>", "Cc: Max Mustermann <m@ex.org>"]],
  );
  assert.deepEqual(splitTrailers("Fix\n\nCC: clang 17"), ["Fix\n\nCC: clang 17", []]);
});

test("the history's secrets: whole, in pieces, split, encoded, and a PIN", () => {
  const d = HistorySecretDetector.fromHistory([
    "export DB_PASSWORD=Sunfl0wer!1987x",
    "the alarm code is 4417",
    "token 3f9a8b7c6d5e4f3a2b1c0d9e",
  ]);
  assert.deepEqual(d.secrets, ["3f9a8b7c6d5e4f3a2b1c0d9e", "sunfl0wer!1987x"]);
  assert.deepEqual(d.pins, ["4417"]);
  assert.equal(d.size, 3);
  const finds: [string, [number, number, string][]][] = [
    ["the password is sunfl0wer!1987x ok", [[16, 31, "secret"]]],
    ["code 4 4 1 7 now", [[5, 12, "secret"]]],
    [
      "first Sunfl0w then er!1987x",
      [
        [6, 13, "secret"],
        [19, 27, "secret"],
      ],
    ],
    ["hash 3f9a8b7c6d5e4f3a2b1c0d9e", [[5, 29, "secret"]]],
    ["sunflower fields", []],
    ["7144", [[0, 4, "secret"]]],
  ];
  for (const [text, want] of finds) assert.deepEqual(spans(d.find(text)), want, text);
  const hazards: [string, [number, number, string] | null][] = [
    ["pass Sunfl", [5, 10, "secret"]],
    ["code 44", [5, 7, "secret"]],
    ["first Sunfl0w then", [6, 18, "secret"]],
    ["plain words", null],
  ];
  for (const [text, want] of hazards) assert.deepEqual(hazard(d.hazard(text)), want, text);
});

test("the helpers the uplink record shares", () => {
  assert.equal(isPiece("sunflow", "sunflower!1987"), true);
  assert.equal(isPiece("sunflower", "sunflower!1987"), false);
  assert.equal(isPiece("granite plum", "granite plum cobalt"), true);
  assert.equal(genericPrefix("https://hooks.slack.com/services/t000/b000/xyz"), 33);
  assert.equal(genericPrefix("ghp_abcdefghijklmnop0123456789"), 4);
  assert.equal(genericPrefix("sunflower!1987"), 0);
  assert.deepEqual(
    [...segmentations('say "aD6;" now')],
    [
      [
        [
          [[0, 3]],
          [
            [4, 10],
            [5, 10],
            [4, 8],
            [5, 8],
          ],
          [[11, 14]],
        ],
        false,
      ],
      [[[[0, 3]], [[5, 8]], [[11, 14]]], true],
    ],
  );
});
