/**
 * The Specialist's forwards on ONNX Runtime, greedy: the int4 graph of the model bundle
 * (`onnx/model.onnx`, converted by onnxruntime-genai's model builder) run with its KV cache, as
 * sdk/onnx_drafter.py runs it on onnxruntime-genai. The session is `onnxruntime-common`'s
 * `InferenceSession`, which `onnxruntime-node` (src/node/drafter.ts) and `onnxruntime-react-native`
 * both implement, so this module imports neither.
 */
import { Tensor, type InferenceSession } from "onnxruntime-common";

/** What the drafter reads of `onnx/genai_config.json`'s `model.decoder`. */
export interface DecoderShape {
  layers: number;
  kvHeads: number;
  headSize: number;
  pastKey: string; // "past_key_values.%d.key"
  pastValue: string;
  presentKey: string; // "present.%d.key"
  presentValue: string;
}

export function decoderShape(genaiConfig: unknown): DecoderShape {
  const d = (genaiConfig as { model?: { decoder?: Record<string, unknown> } }).model?.decoder;
  const inputs = d?.inputs as Record<string, unknown> | undefined;
  const outputs = d?.outputs as Record<string, unknown> | undefined;
  const shape = {
    layers: d?.num_hidden_layers,
    kvHeads: d?.num_key_value_heads,
    headSize: d?.head_size,
    pastKey: inputs?.past_key_names,
    pastValue: inputs?.past_value_names,
    presentKey: outputs?.present_key_names,
    presentValue: outputs?.present_value_names,
  };
  for (const [k, v] of Object.entries(shape)) {
    const ok = k.startsWith("p") ? typeof v === "string" && v.includes("%d") : Number.isInteger(v) && (v as number) > 0;
    if (!ok) throw new Error(`genai_config.json states no usable decoder ${k}: this is not a model the drafter runs`);
  }
  return shape as DecoderShape;
}

/** log-softmax of a row in float32, as numpy's `log_softmax_np` of core/sequence.py. */
export function logSoftmax(logits: Float32Array): Float32Array {
  let max = -Infinity;
  for (const x of logits) if (x > max) max = x;
  let sum = 0;
  for (const x of logits) sum += Math.exp(x - max);
  const lse = Math.fround(max + Math.log(sum));
  const out = new Float32Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - lse;
  return out;
}

/**
 * One sequence: a prefix, then tokens pushed one round at a time, the KV cache kept between
 * forwards and cropped on `truncate`, as core/sequence.py's `CachedSequence` does: each forward's
 * last row is kept by prefix length, so a rollback to a drafted point reads its row without a new
 * forward.
 */
export class OnnxSequence {
  private past: Record<string, Tensor>;
  private ids: number[];
  private cached = 0; // positions in the KV cache
  private rows = new Map<number, Float32Array>(); // prefix length -> logits of the next token

  constructor(
    private readonly session: InferenceSession,
    private readonly shape: DecoderShape,
    prefix: number[],
  ) {
    if (prefix.length === 0) throw new RangeError("a sequence starts from at least one token");
    this.ids = [...prefix];
    this.past = {};
    for (let i = 0; i < shape.layers; i++) {
      for (const name of [shape.pastKey, shape.pastValue]) {
        this.past[name.replace("%d", String(i))] = new Tensor("float32", new Float32Array(0), [1, shape.kvHeads, 0, shape.headSize]);
      }
    }
  }

  get length(): number {
    return this.ids.length;
  }

  push(tokens: number[]): void {
    this.ids.push(...tokens);
  }

  /** The logits of the next token after everything pushed (one forward over what is new). */
  async nextLogits(): Promise<Float32Array> {
    const kept = this.rows.get(this.ids.length);
    if (kept !== undefined && this.cached >= this.ids.length) return kept;
    const ids = this.ids.slice(this.cached);
    const total = this.ids.length;
    const feeds: Record<string, Tensor> = {
      input_ids: new Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]),
      attention_mask: new Tensor("int64", new BigInt64Array(total).fill(1n), [1, total]),
      ...this.past,
    };
    const out = await this.session.run(feeds);
    const logits = out.logits as Tensor;
    const vocab = logits.dims[2]!;
    const rows = logits.dims[1]!;
    const last = (logits.data as Float32Array).slice((rows - 1) * vocab, rows * vocab);
    const s = this.shape;
    for (let i = 0; i < s.layers; i++) {
      this.past[s.pastKey.replace("%d", String(i))] = out[s.presentKey.replace("%d", String(i))] as Tensor;
      this.past[s.pastValue.replace("%d", String(i))] = out[s.presentValue.replace("%d", String(i))] as Tensor;
    }
    this.cached = total;
    this.rows.set(total, last);
    return last;
  }

  /** log P(next token | everything pushed), float32. */
  async nextLogprobs(): Promise<Float32Array> {
    return logSoftmax(await this.nextLogits());
  }

  /** Roll back to the first `n` tokens: the KV cache is cropped to them (or to n - 1, the last
   * token fed again, when no row was kept at n). */
  truncate(n: number): void {
    if (!(n >= 1 && n <= this.ids.length)) throw new RangeError(`cannot truncate a sequence of ${this.ids.length} tokens to ${n}`);
    this.ids.length = n;
    const keep = this.rows.has(n) ? n : n - 1;
    if (keep < this.cached) this.crop(keep);
    for (const m of [...this.rows.keys()]) if (m > this.cached || m < n) this.rows.delete(m);
  }

  private crop(n: number): void {
    for (const [name, t] of Object.entries(this.past)) {
      const [, heads, len, size] = t.dims as [number, number, number, number];
      const data = t.data as Float32Array;
      const cut = new Float32Array(heads * n * size);
      for (let h = 0; h < heads; h++) cut.set(data.subarray(h * len * size, h * len * size + n * size), h * n * size);
      this.past[name] = new Tensor("float32", cut, [1, heads, n, size]);
    }
    this.cached = n;
  }

  /** `n` greedy tokens (the first largest logit on ties), pushed as they are drawn. */
  async greedy(n: number): Promise<number[]> {
    const out: number[] = [];
    for (let k = 0; k < n; k++) {
      const logits = await this.nextLogits();
      let best = 0;
      for (let j = 1; j < logits.length; j++) if (logits[j]! > logits[best]!) best = j;
      out.push(best);
      this.push([best]);
    }
    return out;
  }
}

export class OnnxDrafter {
  constructor(
    readonly session: InferenceSession,
    readonly shape: DecoderShape,
  ) {}

  sequence(prefix: number[]): OnnxSequence {
    return new OnnxSequence(this.session, this.shape, prefix);
  }
}
