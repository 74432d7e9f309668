/**
 * C2SP signed notes and checkpoints with Ed25519 (audit/note.py) and tlog-cosignature/v1
 * (audit/cosignature.py): the key encodings, note parsing, checkpoint bodies, cosignatures.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { concatBytes, equalBytes, fromBase64, toBase64, toHex, utf8 } from "./bytes.js";

export class NoteError extends Error {
  override name = "NoteError";
}

export const ALG_ED25519 = 0x01;
export const ALG_COSIGNATURE_V1 = 0x04;
export const SIG_PREFIX = "\u2014 ";
const MAX_NOTE_BYTES = 64 * 1024;
const MAX_SIGNATURES = 100;
export const MAX_TIMESTAMP = 2n ** 63n - 1n;

function validName(name: string): boolean {
  // Python's str.isprintable() and no whitespace: for these names, printable non-space characters.
  return name.length > 0 && !name.includes("+") && !/[\s\p{C}]/u.test(name);
}

function keyId(name: string, alg: number, publicKey: Uint8Array): Uint8Array {
  return sha256(concatBytes(utf8.encode(name), Uint8Array.of(0x0a, alg), publicKey)).slice(0, 4);
}

/** Ed25519 verification as RFC 8032 states it (not ZIP 215's laxer rule), as OpenSSL checks it. */
export function ed25519Verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  try {
    return ed25519.verify(signature, message, publicKey, { zip215: false });
  } catch {
    return false;
  }
}

/** A signed-note public key: a log's (algorithm 0x01) or a witness's (0x04). */
export class NoteKey {
  readonly id: Uint8Array;

  constructor(
    readonly name: string,
    readonly publicKey: Uint8Array,
    readonly alg: number = ALG_ED25519,
  ) {
    if (!validName(name)) throw new NoteError(`key name ${JSON.stringify(name)} is empty or contains a space or '+'`);
    if (publicKey.length !== 32) throw new NoteError("an Ed25519 public key is 32 bytes");
    this.id = keyId(name, alg, publicKey);
  }

  toString(): string {
    return `${this.name}+${toHex(this.id)}+${toBase64(concatBytes(Uint8Array.of(this.alg), this.publicKey))}`;
  }

  /** `<name>+<hex key ID>+<base64(alg || key)>`, its key ID checked. */
  static parse(text: string, alg: number = ALG_ED25519): NoteKey {
    const parts = text.trim().split("+");
    if (parts.length < 3) throw new NoteError("a verifier key reads <name>+<hex key ID>+<base64 key>");
    const [name, hexId] = [parts[0]!, parts[1]!];
    const raw = fromBase64(parts.slice(2).join("+"));
    if (raw === null || raw.length !== 33 || raw[0] !== alg) {
      throw new NoteError(`the key is not an Ed25519 key of algorithm byte ${alg}`);
    }
    const key = new NoteKey(name, raw.slice(1), alg);
    if (hexId.length !== 8 || hexId.toLowerCase() !== toHex(key.id)) {
      throw new NoteError(`key ${name}: the key ID ${hexId} does not match the key`);
    }
    return key;
  }

  verify(message: Uint8Array, signature: Uint8Array): boolean {
    return ed25519Verify(this.publicKey, message, signature);
  }
}

/** A private signing key (32-byte seed) in the signed-note encoding: a log's or a witness's. */
export class NoteSigner {
  readonly key: NoteKey;

  constructor(
    name: string,
    private readonly seed: Uint8Array,
    alg: number = ALG_ED25519,
  ) {
    this.key = new NoteKey(name, ed25519.getPublicKey(seed), alg);
  }

  static parse(text: string, alg: number = ALG_ED25519): NoteSigner {
    const parts = text.trim().split("+");
    if (parts.length < 5 || parts[0] !== "PRIVATE" || parts[1] !== "KEY") {
      throw new NoteError("a signer key reads PRIVATE+KEY+<name>+<hex key ID>+<base64 seed>");
    }
    const raw = fromBase64(parts.slice(4).join("+"));
    if (raw === null || raw.length !== 33 || raw[0] !== alg) throw new NoteError("the signer key is not an Ed25519 seed");
    const signer = new NoteSigner(parts[2]!, raw.slice(1), alg);
    if (parts[3]!.toLowerCase() !== toHex(signer.key.id)) throw new NoteError("the signer key's ID does not match the key");
    return signer;
  }

  sign(message: Uint8Array): Uint8Array {
    return ed25519.sign(message, this.seed);
  }

  /** A signed note of `text` (lines each ending in a newline). */
  signNote(text: string): string {
    const line = toBase64(concatBytes(this.key.id, this.sign(utf8.encode(text))));
    return `${text}\n${SIG_PREFIX}${this.key.name} ${line}\n`;
  }
}

export interface NoteSignature {
  name: string;
  keyId: Uint8Array;
  signature: Uint8Array;
}

export interface Note {
  text: string;
  signatures: NoteSignature[];
}

/** Split a signed note into text and signature lines; signatures are not checked here. */
export function parseNote(note: string): Note {
  if (utf8.encode(note).length > MAX_NOTE_BYTES) throw new NoteError("the note is too large");
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x09\x0b-\x1f]/.test(note)) throw new NoteError("the note contains control characters");
  const split = note.lastIndexOf("\n\n");
  if (split < 0 || !note.endsWith("\n")) throw new NoteError("the note has no signature block after a blank line");
  const [text, block] = [note.slice(0, split + 1), note.slice(split + 2)];
  const signatures: NoteSignature[] = [];
  for (const line of block.slice(0, -1).split("\n")) {
    if (!line.startsWith(SIG_PREFIX)) throw new NoteError("a signature line does not start with an em dash and a space");
    const rest = line.slice(SIG_PREFIX.length);
    const space = rest.indexOf(" ");
    const [name, b64] = space < 0 ? [rest, ""] : [rest.slice(0, space), rest.slice(space + 1)];
    const raw = fromBase64(b64);
    if (raw === null) throw new NoteError("a signature is not valid base64");
    if (!validName(name) || raw.length < 5) throw new NoteError("a signature line is malformed");
    signatures.push({ name, keyId: raw.slice(0, 4), signature: raw.slice(4) });
  }
  if (signatures.length > MAX_SIGNATURES) throw new NoteError("the note has too many signatures");
  return { text, signatures };
}

/** The note's text if `key` signed it; a line claiming `key` that does not verify rejects it. */
export function openNote(note: string, key: NoteKey): string {
  const parsed = parseNote(note);
  const ours = parsed.signatures.filter((s) => s.name === key.name && equalBytes(s.keyId, key.id));
  if (ours.length === 0) throw new NoteError(`no signature by the log key ${key.name}+${toHex(key.id)}`);
  for (const s of ours) {
    if (!key.verify(utf8.encode(parsed.text), s.signature)) throw new NoteError("the note's signature does not verify");
  }
  return parsed.text;
}

export interface Checkpoint {
  origin: string;
  size: bigint;
  root: Uint8Array;
}

export function checkpointBody(c: Checkpoint): string {
  return `${c.origin}\n${c.size}\n${toBase64(c.root)}\n`;
}

export function parseCheckpointBody(text: string): Checkpoint {
  const lines = text.split("\n");
  if (lines.length < 4 || lines[lines.length - 1] !== "" || lines.slice(0, -1).some((l) => !l)) {
    throw new NoteError("a checkpoint body is at least three non-empty lines");
  }
  if (lines.length > 4) throw new NoteError("the checkpoint carries extension lines this log never writes");
  const [origin, size, rootB64] = [lines[0]!, lines[1]!, lines[2]!];
  if (!/^(0|[1-9][0-9]{0,19})$/.test(size)) throw new NoteError(`the checkpoint tree size ${size} is not a decimal number`);
  const root = fromBase64(rootB64);
  if (root === null || root.length !== 32) throw new NoteError("the checkpoint root hash is not a canonical base64 SHA-256 hash");
  return { origin, size: BigInt(size), root };
}

export function openCheckpoint(note: string, key: NoteKey): Checkpoint {
  const c = parseCheckpointBody(openNote(note, key));
  if (c.origin !== key.name) throw new NoteError(`the checkpoint is for log ${c.origin}, not ${key.name}`);
  return c;
}

/** What a cosignature/v1 signs: the header line, the time line, then the checkpoint body. */
export function cosignedMessage(body: string, timestamp: bigint): Uint8Array {
  return utf8.encode(`cosignature/v1\ntime ${timestamp}\n${body}`);
}

function timeBytes(t: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, t, false);
  return out;
}

/** The 76-byte cosignature/v1 (key ID || big-endian time || Ed25519) of a checkpoint body. */
export function cosign(signer: NoteSigner, body: string, timestamp: bigint): Uint8Array {
  if (timestamp < 0n || timestamp > MAX_TIMESTAMP) throw new NoteError("a cosignature timestamp is below 2^63");
  return concatBytes(signer.key.id, timeBytes(timestamp), signer.sign(cosignedMessage(body, timestamp)));
}

/** The timestamp of a 76-byte cosignature over `body` by witness `key`; NoteError if it is bogus. */
export function verifyCosignature(key: NoteKey, body: string, signature: Uint8Array): bigint {
  if (signature.length !== 76 || !equalBytes(signature.slice(0, 4), key.id)) {
    throw new NoteError(`the cosignature is not by witness key ${key.name}+${toHex(key.id)}`);
  }
  const timestamp = new DataView(signature.buffer, signature.byteOffset + 4, 8).getBigUint64(0, false);
  if (timestamp > MAX_TIMESTAMP) throw new NoteError("the cosignature has a timestamp above 2^63 - 1");
  if (!key.verify(cosignedMessage(body, timestamp), signature.slice(12))) {
    throw new NoteError(`the cosignature by ${key.name}+${toHex(key.id)} does not verify`);
  }
  return timestamp;
}

/** Every cosignature line of `note` by witness `key`, verified: [timestamp, checkpoint] each. */
export function noteCosignatures(note: string, key: NoteKey): { timestamp: bigint; checkpoint: Checkpoint }[] {
  const parsed = parseNote(note);
  const checkpoint = parseCheckpointBody(parsed.text);
  return parsed.signatures
    .filter((s) => s.name === key.name && equalBytes(s.keyId, key.id))
    .map((s) => ({ timestamp: verifyCosignature(key, parsed.text, concatBytes(s.keyId, s.signature)), checkpoint }));
}
