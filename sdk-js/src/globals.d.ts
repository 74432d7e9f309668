// The encoding API exists on Node, browsers and Hermes (React Native 0.74+); the core's type check
// has no DOM or Node types, so it names only what it uses.
declare class TextEncoder {
  encode(input?: string): Uint8Array;
}
declare class TextDecoder {
  constructor(label?: string, options?: { fatal?: boolean });
  decode(input?: Uint8Array): string;
}
// Timers exist on Node, browsers and Hermes alike; the session loop bounds each round with them.
declare function setTimeout(callback: () => void, ms: number): unknown;
declare function clearTimeout(handle: unknown): void;
