/** Node's `fs` as the storage of an audit log directory (`LogFiles`); links and non-files are refused. */
import { lstatSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { LogFiles } from "../audit/scan.js";

function regular(path: string, what: string): Uint8Array {
  const st = lstatSync(path);
  if (!st.isFile()) throw new Error(`${path} is not a regular file: ${what} must be one`);
  return new Uint8Array(readFileSync(path));
}

export function logDirectory(dir: string): LogFiles {
  const segments = join(dir, "segments");
  if (!lstatSync(segments, { throwIfNoEntry: false })?.isDirectory()) {
    throw new Error(`${dir} is not an audit log (no segments/ folder)`);
  }
  return {
    segmentNames: () => readdirSync(segments),
    readSegment: (name) => regular(join(segments, name), "a segment"),
    readCheckpoints: () => {
      const path = join(dir, "checkpoints.jsonl");
      return lstatSync(path, { throwIfNoEntry: false }) === undefined ? null : regular(path, "the checkpoints file");
    },
    tornFiles: () => {
      const torn = join(dir, "torn");
      if (lstatSync(torn, { throwIfNoEntry: false }) === undefined) return [];
      return readdirSync(torn).map((name) => ({ name, data: regular(join(torn, name), "torn evidence") }));
    },
  };
}
