/** Node's `fs` as the storage of an audit log directory: read (`LogFiles`, for `verifyLog`) and
 * written (`LogStorage`, for `AuditLog`), as audit/log.py lays it out: folders 0700, files 0600,
 * each append fsync'ed (and the folder, when it made a file) before it returns. Links and
 * non-files are refused. The writer lock is dir/lock, as audit/log.py's. Also the key files and the
 * device certificate the log binds. */
import { X509Certificate, createHash } from "node:crypto";
import { closeSync, fsyncSync, ftruncateSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, writeSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { tryLock, unlock } from "fs-native-extensions";
import { AuditError, type DeviceIdentity, type LogStorage } from "../audit/log.js";
import type { LogFiles } from "../audit/scan.js";
import { ALG_COSIGNATURE_V1, NoteKey, NoteSigner } from "../note.js";

function regular(path: string, what: string): Uint8Array {
  const st = lstatSync(path);
  if (!st.isFile()) throw new Error(`${path} is not a regular file: ${what} must be one`);
  return new Uint8Array(readFileSync(path));
}

function reader(dir: string): LogFiles {
  const segments = join(dir, "segments");
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

export function logDirectory(dir: string): LogFiles {
  if (!lstatSync(join(dir, "segments"), { throwIfNoEntry: false })?.isDirectory()) {
    throw new Error(`${dir} is not an audit log (no segments/ folder)`);
  }
  return reader(dir);
}

function fsyncFolder(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** All of `data` to `fd` (a write may take only part of it), then fsync'ed. */
function writeAllSync(fd: number, data: Uint8Array): void {
  let at = 0;
  while (at < data.length) at += writeSync(fd, data, at, data.length - at);
  fsyncSync(fd);
}

/** Append `data` to `path` (created 0600), fsync'ed; a new file's folder is fsync'ed too. */
function appendDurably(path: string, data: Uint8Array): void {
  const st = lstatSync(path, { throwIfNoEntry: false });
  if (st !== undefined && !st.isFile()) throw new Error(`${path} is not a regular file`);
  const fd = openSync(path, "a", 0o600);
  try {
    writeAllSync(fd, data);
  } finally {
    closeSync(fd);
  }
  if (st === undefined) fsyncFolder(dirname(path));
}

/**
 * The writer lock of the log in `dir`: an exclusive lock on dir/lock (created 0600), held by an open
 * descriptor until the release closes it, and by no one once the process is gone. Node has no flock,
 * so this is fs-native-extensions' lock: on Linux an open-file-description lock (fcntl F_OFD_SETLK),
 * which the Python writer takes beside its flock (audit/log.py `_take_lock`), so a Python and a
 * TypeScript device exclude each other; on Apple platforms flock, the Python writer's own.
 */
function takeWriterLock(dir: string): () => void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = join(dir, "lock");
  const st = lstatSync(path, { throwIfNoEntry: false });
  if (st !== undefined && !st.isFile()) throw new AuditError(`${path} is not a regular file: the log's lock must be one`);
  const fd = openSync(path, "a+", 0o600);
  let held = false;
  try {
    held = tryLock(fd);
  } finally {
    if (!held) closeSync(fd);
  }
  if (!held) throw new AuditError(`the audit log ${dir} is open in another process`);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    try {
      unlock(fd);
    } finally {
      closeSync(fd);
    }
  };
}

/** The audit log directory `dir` on `fs`, for `AuditLog.open` (created on first use). */
export function logStorage(dir: string): LogStorage {
  const segments = join(dir, "segments");
  return {
    ...reader(dir),
    lock: () => takeWriterLock(dir),
    exists: () => lstatSync(segments, { throwIfNoEntry: false })?.isDirectory() ?? false,
    create: () => {
      const st = lstatSync(dir, { throwIfNoEntry: false });
      if (st !== undefined && (!st.isDirectory() || readdirSync(dir).some((n) => n !== "lock"))) {
        throw new Error(`${dir} exists, is not empty, and is not an audit log`);
      }
      mkdirSync(segments, { recursive: true, mode: 0o700 });
      fsyncFolder(dir);
      fsyncFolder(dirname(resolve(dir)));
    },
    appendSegment: (name, data) => appendDurably(join(segments, name), data),
    appendCheckpoints: (data) => appendDurably(join(dir, "checkpoints.jsonl"), data),
    keepTorn: (name, data) => {
      const torn = join(dir, "torn");
      const made = lstatSync(torn, { throwIfNoEntry: false }) === undefined;
      mkdirSync(torn, { recursive: true, mode: 0o700 });
      if (made) fsyncFolder(dir);
      const fd = openSync(join(torn, name), "w", 0o600);
      try {
        writeAllSync(fd, data);
      } finally {
        closeSync(fd);
      }
      fsyncFolder(torn);
    },
    truncate: (file, length) => {
      if (file !== "checkpoints.jsonl" && !/^segments\/seg-[0-9]{12}\.log$/.test(file)) throw new Error(`${file} is not a file of the log`);
      const fd = openSync(join(dir, file), "r+");
      try {
        ftruncateSync(fd, length);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    },
  };
}

function keyText(path: string, what: string, secret: boolean): string {
  const st = lstatSync(path);
  if (!st.isFile()) throw new Error(`${path} is not a regular file: ${what} must be one`);
  if (secret && (st.mode & 0o077) !== 0) {
    throw new Error(`${path} (${what}) can be read or written by others (mode ${(st.mode & 0o777).toString(8)}): chmod 600 ${path}`);
  }
  return readFileSync(path, "utf8").trim();
}

/** The log's signing key (`audit keygen`'s NAME.key): a regular file only its owner can read or write. */
export function loadSigningKey(path: string): NoteSigner {
  return NoteSigner.parse(keyText(path, "the audit log's signing key", true));
}

/** A witness's public key (`server witness-key`'s NAME.witness.pub). */
export function loadWitnessKey(path: string): NoteKey {
  const text = keyText(path, "a witness key", false);
  if (text.startsWith("PRIVATE+KEY+")) throw new Error(`${path} is a witness's private key; give its public key (.pub)`);
  return NoteKey.parse(text, ALG_COSIGNATURE_V1);
}

/** The device's identity as mutual TLS shows it (audit/identity.py): its certificate's one common
 * name and the SHA-256 of its DER (the first certificate of the PEM file). */
export function deviceIdentity(certPath: string): DeviceIdentity {
  const cert = new X509Certificate(readFileSync(certPath));
  const names = cert.subject.split("\n").filter((l) => l.startsWith("CN="));
  const name = names.length === 1 ? names[0]!.slice(3) : "";
  if (!name || name.length > 128) throw new Error(`${certPath}: the device certificate must name the device in exactly one common name`);
  return { name, certSha256: createHash("sha256").update(cert.raw).digest("hex") };
}
