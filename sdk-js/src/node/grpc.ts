/**
 * The session transport on `@grpc/grpc-js` with mutual TLS (sdk/remote.py's `RemoteVerifier`):
 * the device's certificate and key, and as trust anchors exactly the pinned anchors of a pins file
 * in the Python device's format (sdk/pinning.py): `sha256/<base64 SPKI SHA-256>` lines, at least
 * two, and the anchor certificates they name, each pin naming an anchor and each anchor pinned.
 */
import { createHash, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import { FrameQueue, VerifierLost, VerifierRefused, type Transport, type VerifierStream } from "../transport.js";

export const MIN_PINS = 2;
const PIN = /^sha256\/([A-Za-z0-9+/]{43}=)$/;
const PEM_BLOCK = /-----BEGIN CERTIFICATE-----\r?\n[\s\S]*?-----END CERTIFICATE-----\r?\n?/g;

export class PinningError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PinningError";
  }
}

/** `sha256/` + base64 SHA-256 of a certificate's DER SubjectPublicKeyInfo (core/pins.py). */
export function spkiPin(pem: string): string {
  const der = new X509Certificate(pem).publicKey.export({ type: "spki", format: "der" });
  return "sha256/" + createHash("sha256").update(der).digest("base64");
}

/** The pinned anchors of a pins file (and an optional separate anchor bundle), as PEM for gRPC's
 * roots; `PinningError` on anything sdk/pinning.py's `load_pin_set` refuses. */
export function loadPinSet(pinsPath: string, anchorsPath?: string): { pins: string[]; rootPem: string } {
  const data = readFileSync(pinsPath, "latin1");
  const extra = anchorsPath === undefined ? "" : readFileSync(anchorsPath, "latin1");
  const text = data.replace(PEM_BLOCK, "");
  if ([...text].some((c) => c.charCodeAt(0) > 0x7f)) throw new PinningError(`${pinsPath} is not an ASCII pins file`);
  if (text.includes("-----BEGIN")) throw new PinningError(`${pinsPath} holds a PEM block that is not a certificate (or is cut short)`);
  const pins: string[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.split("#", 1)[0]!.trim();
    if (!line) return;
    const m = PIN.exec(line);
    if (m === null || Buffer.from(m[1]!, "base64").length !== 32) {
      throw new PinningError(`${pinsPath} line ${i + 1} is not a pin sha256/<base64 SHA-256>: ${JSON.stringify(line.slice(0, 60))}`);
    }
    pins.push(line);
  });
  if (new Set(pins).size !== pins.length) throw new PinningError(`${pinsPath} lists a pin twice`);
  if (pins.length < MIN_PINS) throw new PinningError(`${pinsPath} has ${pins.length} pin(s); at least ${MIN_PINS} are required (a serving anchor and a backup)`);
  const extraCerts = extra.match(PEM_BLOCK) ?? [];
  if (anchorsPath !== undefined && extraCerts.length === 0) throw new PinningError(`${anchorsPath} holds no PEM certificate`);
  const anchors = [...(data.match(PEM_BLOCK) ?? []), ...extraCerts];
  const named = new Set<string>();
  for (const pem of anchors) {
    let pin: string;
    try {
      pin = spkiPin(pem);
    } catch (e) {
      throw new PinningError(`a certificate in ${pinsPath} does not parse: ${(e as Error).message}`);
    }
    if (!pins.includes(pin)) throw new PinningError(`anchor certificate '${new X509Certificate(pem).subject}' in ${pinsPath} is not pinned`);
    named.add(pin);
  }
  const unnamed = pins.find((p) => !named.has(p));
  if (unnamed !== undefined) throw new PinningError(`pin ${unnamed} in ${pinsPath} names no anchor certificate`);
  return { pins, rootPem: anchors.map((a) => (a.endsWith("\n") ? a : a + "\n")).join("") };
}

export interface GrpcTransportOptions {
  /** HOST:PORT of the verifier. */
  target: string;
  pins: string;
  anchors?: string;
  cert: string;
  key: string;
  /** Bound on the TLS connection before a session starts, ms (sdk/remote.py's 10 s). */
  connectTimeoutMs?: number;
  /** The name the server's certificate must carry, when it is not the target's host. */
  serverName?: string;
}

const METHOD = "/specsteer.v1.Verifier/Session";
const LOST = new Set([grpc.status.UNAVAILABLE, grpc.status.CANCELLED, grpc.status.DEADLINE_EXCEEDED, grpc.status.UNKNOWN, grpc.status.INTERNAL]);

/** The verifier over gRPC with mutual TLS and pinned anchors; one client, one stream per session. */
export class GrpcTransport implements Transport {
  private readonly client: grpc.Client;
  private readonly connectTimeoutMs: number;

  constructor(o: GrpcTransportOptions) {
    const { rootPem } = loadPinSet(o.pins, o.anchors);
    const creds = grpc.credentials.createSsl(Buffer.from(rootPem), readFileSync(o.key), readFileSync(o.cert));
    const options: grpc.ChannelOptions = {
      "grpc.enable_retries": 0,
      "grpc.use_local_subchannel_pool": 1,
      "grpc.default_compression_algorithm": 0,
    };
    if (o.serverName !== undefined) options["grpc.ssl_target_name_override"] = o.serverName;
    this.client = new grpc.Client(o.target, creds, options);
    this.connectTimeoutMs = o.connectTimeoutMs ?? 10_000;
  }

  async open(deadline?: number): Promise<VerifierStream> {
    const by = Math.min(Date.now() + this.connectTimeoutMs, deadline ?? Infinity);
    await new Promise<void>((resolve, reject) => {
      this.client.waitForReady(by, (err) => {
        if (err) reject(new VerifierLost("verifier-unreachable", `no verifier connected in time (connect timeout ${this.connectTimeoutMs / 1000} s): ${err.message}`));
        else resolve();
      });
    });
    const call = this.client.makeBidiStreamRequest<Uint8Array, Uint8Array>(
      METHOD,
      (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength),
      (b: Buffer) => new Uint8Array(b),
    );
    const q = new FrameQueue();
    let ended: (() => void) | null = null;
    call.on("data", (b: Uint8Array) => q.push(b));
    call.on("error", (e: grpc.ServiceError) => {
      q.fail(
        LOST.has(e.code)
          ? new VerifierLost("verifier-lost", `the verifier's stream broke (${grpc.status[e.code]}): ${e.details}`)
          : new VerifierRefused(`the verifier refused the session (${grpc.status[e.code]}): ${e.details}`),
      );
      ended?.();
    });
    call.on("end", () => {
      q.end();
      ended?.();
    });
    call.on("status", () => ended?.());
    return {
      send(frame: Uint8Array): void {
        if (q.done) throw new VerifierLost("verifier-lost", "the verifier's stream is gone");
        call.write(frame);
      },
      receive: (ms: number) => q.next(ms),
      close(ms: number): Promise<void> {
        return new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            call.cancel();
            resolve();
          }, ms);
          ended = () => {
            clearTimeout(timer);
            resolve();
          };
          if (q.done) ended();
          call.end();
        });
      },
      cancel(): void {
        call.cancel();
      },
    };
  }

  close(): void {
    this.client.close();
  }
}
