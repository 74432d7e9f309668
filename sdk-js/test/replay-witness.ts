/** The replayer of conformance/v1/witness/decisions.json: each step against one fresh witness. */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fromHex, toHex } from "../src/bytes.js";
import { ALG_COSIGNATURE_V1, NoteSigner } from "../src/note.js";
import { decodeUplink } from "../src/wire.js";
import { Witness } from "../src/witness.js";
import type { Result } from "./replay-wire.js";
import { CONFORMANCE, type Json } from "./vectors.js";

export function replayWitness(doc: Json): Result[] {
  const keyFile = String(doc.witness_key).replace(/\.pub$/, ".key");
  const signer = NoteSigner.parse(readFileSync(join(CONFORMANCE, keyFile), "utf8"), ALG_COSIGNATURE_V1);
  return doc.vectors.map((v: Json): Result => {
    const witness = new Witness(signer);
    const problems: string[] = [];
    v.steps.forEach((step: Json) => {
      const frame = decodeUplink(fromHex(step.frame_hex));
      if (frame.kind !== "close" || frame.witness === null) {
        problems.push(`${step.name}: not a Close with a witness request`);
        return;
      }
      const d = witness.cosign(step.device, frame.witness, BigInt(step.time));
      const got =
        d.decision === "cosigned"
          ? { decision: "cosigned", witness: d.witness, timestamp: Number(d.timestamp), signature_hex: toHex(d.signature) }
          : { decision: "refused", category: d.category };
      if (JSON.stringify(got) !== JSON.stringify(step.expected)) problems.push(`${step.name}: ${JSON.stringify(got)}`);
    });
    return [v.name, problems.length === 0, problems.join("; ")];
  });
}
