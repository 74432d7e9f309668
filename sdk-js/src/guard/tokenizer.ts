/**
 * The Specialist's tokenizer as the guard uses it (`Tokenizer` of ./spans.js), over
 * `@huggingface/tokenizers`: the same tokenizer.json the Python device loads with the Rust
 * `tokenizers.Tokenizer` (core/device_lm.py, `FastTokenizer`).
 */
import { Tokenizer as HfBackend } from "@huggingface/tokenizers";
import type { Tokenizer } from "./spans.js";

/**
 * `Tokenizer` of ./spans.js on a Hugging Face tokenizer.json. Offsets need a byte-level BPE
 * without a normalizer (the default Specialist's): on another, `encodeWithOffsets` throws where
 * the tokens do not spell the text (the guard fails closed) rather than guess.
 */
export class HfTokenizer implements Tokenizer {
  readonly size: number;
  private readonly backend: HfBackend;
  // Added tokens (matched in the raw text, not byte-level encoded): their UTF-8 length in bytes.
  private readonly addedBytes = new Map<number, number>();

  /** From tokenizer.json and tokenizer_config.json (as `PromptRenderer` reads them), or a tokenizer already built. */
  constructor(tokenizerJson: object | HfBackend, tokenizerConfig: object = {}) {
    this.backend = tokenizerJson instanceof HfBackend ? tokenizerJson : new HfBackend(tokenizerJson, tokenizerConfig);
    const bytes = new TextEncoder();
    for (const [id, token] of this.backend.get_added_tokens_decoder()) {
      this.addedBytes.set(id, bytes.encode(token.content).length);
    }
    // Python's `len(tokenizer)`: the distinct token strings of the vocabulary and the added tokens.
    this.size = this.backend.get_vocab(true).size;
  }

  encode(text: string): number[] {
    return [...this.backend.encode(text, { add_special_tokens: false }).ids];
  }

  /** As the Rust backend's `decode(ids, skip_special_tokens=True)`: no clean-up of spaces before punctuation. */
  decode(ids: readonly number[]): string {
    if (ids.length === 0) return "";
    return this.backend.decode([...ids], { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  }

  /**
   * The JavaScript library reports no offsets: they are derived as the Rust library reports them
   * for a tokenizer without a normalizer (the default Specialist's). Byte-level BPE tokens are
   * UTF-8 bytes, one character of the token's string per byte, and concatenated they are the
   * text's bytes; a token's offsets run from the start of the character holding its first byte
   * to the end of the character holding its last one (so two tokens that split a character both
   * cover all of it), a leading space included.
   */
  encodeWithOffsets(text: string): { ids: number[]; offsets: [number, number][] } {
    const enc = this.backend.encode(text, { add_special_tokens: false });
    // For each UTF-8 byte of `text`: the UTF-16 start and end of its character.
    const starts: number[] = [];
    const ends: number[] = [];
    let unit = 0;
    for (const ch of text) {
      const cp = ch.codePointAt(0)!;
      // A lone surrogate is 3 bytes, as the U+FFFD a UTF-8 encoder puts in its place.
      const n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
      for (let k = 0; k < n; k++) {
        starts.push(unit);
        ends.push(unit + ch.length);
      }
      unit += ch.length;
    }
    const offsets: [number, number][] = [];
    let at = 0;
    for (const [i, id] of enc.ids.entries()) {
      const end = at + (this.addedBytes.get(id) ?? enc.tokens[i]!.length);
      // Only a tokenizer unlike the byte-level ones (a normalizer, an unknown token) fails this.
      if (end > starts.length) throw new Error("this tokenizer's tokens do not spell the text's bytes: no offsets");
      offsets.push([starts[at]!, ends[end - 1]!]);
      at = end;
    }
    if (at !== starts.length) throw new Error("this tokenizer's tokens do not spell the text's bytes: no offsets");
    return { ids: [...enc.ids], offsets };
  }
}
