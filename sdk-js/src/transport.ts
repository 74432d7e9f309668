/**
 * The narrow interface between the device's session loop and a verifier (sdk/transport.py,
 * sdk/remote.py): one bidirectional stream of serialized frames per session. The core never
 * opens a socket; `src/node/grpc.ts` implements this on `@grpc/grpc-js` with mutual TLS and
 * pinned anchors, and a React Native gRPC bridge implements the same four calls.
 */
import { SpecSteerError } from "./errors.js";

/** The verifier is unreachable, timed out, or went away mid-session: a fault, not a breach
 * (sdk/transport.py's `VerifierLost`). `reason` goes into the stats: `verifier-unreachable`,
 * `verifier-timeout`, `verifier-lost`. */
export class VerifierLost extends SpecSteerError {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = "VerifierLost";
  }
}

/** The verifier refused the session (a status other than a lost connection): never fallen back from. */
export class VerifierRefused extends SpecSteerError {
  constructor(message: string) {
    super(message);
    this.name = "VerifierRefused";
  }
}

/** One session's stream: uplinks (serialized `specsteer.v1.Uplink`) out, downlinks in. */
export interface VerifierStream {
  /** Queue one uplink frame; throws `VerifierLost` when the stream is already gone. */
  send(frame: Uint8Array): void;
  /** The next downlink frame, or `VerifierLost` (`verifier-timeout` after `timeoutMs`,
   * `verifier-lost` when the stream ended or broke), or `VerifierRefused`. */
  receive(timeoutMs: number): Promise<Uint8Array>;
  /** Half-close after the Close frame and wait (at most `timeoutMs`) for the verifier to end the
   * stream; never throws. */
  close(timeoutMs: number): Promise<void>;
  /** Drop the stream at once (a lost or broken session). */
  cancel(): void;
}

export interface Transport {
  /** A new session stream, connected; `VerifierLost("verifier-unreachable")` when no verifier
   * answers within the transport's connect timeout, or by `deadline` (a `Date.now()` instant) if
   * that comes first (a resumed session's tries share one). */
  open(deadline?: number): Promise<VerifierStream>;
}

type Waiter = { resolve: (b: Uint8Array) => void; reject: (e: Error) => void };

/**
 * The receiving half most transports need: frames and the stream's end queued as they arrive,
 * read one at a time with a timeout. A transport calls `push`, `end` and `fail`.
 */
export class FrameQueue {
  private frames: Uint8Array[] = [];
  private waiter: Waiter | null = null;
  private error: Error | null = null;
  private ended = false;

  push(frame: Uint8Array): void {
    if (this.waiter !== null) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve(frame);
    } else this.frames.push(frame);
  }

  /** The stream ended: a reader waiting (or the next) gets `VerifierLost("verifier-lost")`. */
  end(): void {
    this.fail(new VerifierLost("verifier-lost", "the verifier ended the session without answering"));
    this.ended = true;
  }

  fail(error: Error): void {
    if (this.error === null) this.error = error;
    if (this.waiter !== null) {
      const w = this.waiter;
      this.waiter = null;
      w.reject(this.error);
    }
  }

  get done(): boolean {
    return this.ended || this.error !== null;
  }

  next(timeoutMs: number): Promise<Uint8Array> {
    const frame = this.frames.shift();
    if (frame !== undefined) return Promise.resolve(frame);
    if (this.error !== null) return Promise.reject(this.error);
    return new Promise<Uint8Array>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        reject(new VerifierLost("verifier-timeout", `the verifier did not answer within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.waiter = {
        resolve: (b) => {
          clearTimeout(timer);
          resolve(b);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
    });
  }
}
