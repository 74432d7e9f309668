/**
 * Prompt rendering (core/prompts.py, core/chat_template.py, core/device_lm.py): the public prompt
 * and the author's retrieved examples become the conversation the Specialist's chat template
 * renders, then the token IDs it drafts from; the raw prompt alone is what goes up to the verifier.
 * The template runs on `@huggingface/jinja`, the tokenizer on `@huggingface/tokenizers` (pure
 * JavaScript, so React Native runs them too); `prompts/render.json` holds both to the Python device.
 */
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { HfTokenizer } from "./guard/tokenizer.js";

export interface Example {
  subject: string;
  body: string;
}

export interface Message {
  role: "user" | "assistant" | "system";
  content: string;
}

/** What the device reads of a model to render prompts: tokenizer.json, tokenizer_config.json, the template. */
export interface ModelTextFiles {
  tokenizerJson: object;
  tokenizerConfig: Record<string, unknown>;
  /** chat_template.jinja's text, else null (then tokenizer_config.json's `chat_template`, if a string). */
  chatTemplate: string | null;
}

const CONTEXT_HEADER = "Earlier writing by the same author, for reference:";
const ENTRY_SEP = "\n\n---\n\n";
// The special tokens transformers passes to a template.
const TEMPLATE_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

/** The public prompt of the commit-message task: the subject line only, never the history. */
export function taskPrompt(subject: string): string {
  return (
    "Write the body of the git commit message whose subject line is below: a few sentences of plain prose " +
    "that explain what the change does and why. Reply with the body text only, without the subject line, " +
    `headings, lists or code.\n\nSubject: ${subject.trim()}`
  );
}

export function contextText(examples: Example[]): string {
  return examples.map((e) => (e.body ? `Subject: ${e.subject}\n\n${e.body}` : `Subject: ${e.subject}`)).join(ENTRY_SEP);
}

function tokenText(value: unknown): string | null {
  if (typeof value === "string") return value;
  if (value !== null && typeof value === "object" && typeof (value as { content?: unknown }).content === "string") {
    return (value as { content: string }).content;
  }
  return null;
}

export class PromptRenderer {
  private readonly tokenizer: Tokenizer;
  private readonly template: Template | null;
  private readonly specials: Record<string, string> = {};

  constructor(files: ModelTextFiles) {
    this.tokenizer = new Tokenizer(files.tokenizerJson, files.tokenizerConfig);
    const source = files.chatTemplate ?? files.tokenizerConfig.chat_template;
    // A list of named templates is a tool-use layout the device never renders.
    this.template = typeof source === "string" && source !== "" ? new Template(source) : null;
    for (const [k, v] of Object.entries(files.tokenizerConfig)) {
      const text = tokenText(v);
      if (TEMPLATE_TOKENS.includes(k) && text !== null) this.specials[k] = text;
    }
  }

  get hasChatTemplate(): boolean {
    return this.template !== null;
  }

  encode(text: string, addSpecialTokens: boolean): number[] {
    return [...this.tokenizer.encode(text, { add_special_tokens: addSpecialTokens }).ids];
  }

  decode(ids: number[]): string {
    return this.tokenizer.decode(ids, { skip_special_tokens: false });
  }

  renderChat(messages: Message[], addGenerationPrompt: boolean): string {
    if (this.template === null) throw new Error("this model has no chat template");
    return this.template.render({
      messages: messages.map((m) => ({ ...m })),
      tools: null,
      documents: null,
      add_generation_prompt: addGenerationPrompt,
      ...this.specials,
    });
  }

  /** The conversation of `renderPrompt`: the examples with a body, best match last, then the prompt. */
  static messages(prompt: string, examples: Example[]): Message[] {
    const out: Message[] = [];
    for (const e of examples.filter((x) => x.body).reverse()) {
      out.push({ role: "user", content: taskPrompt(e.subject) }, { role: "assistant", content: e.body });
    }
    out.push({ role: "user", content: prompt });
    return out;
  }

  /** Token IDs that put `prompt` (after the author's `examples`, best first) in front of the Specialist. */
  renderPrompt(prompt: string, examples: Example[] = []): number[] {
    if (this.template !== null) {
      return this.encode(this.renderChat(PromptRenderer.messages(prompt, examples), true), false);
    }
    const user = examples.length > 0 ? `${CONTEXT_HEADER}\n\n${contextText(examples)}\n\n---\n\n${prompt}` : prompt;
    return this.encode(`${user}\n\n`, true);
  }

  /** This renderer's tokenizer as the egress guard reads drafts through it (src/guard/), sharing
   * the parsed tokenizer.json rather than reading it again. */
  guardTokenizer(): HfTokenizer {
    return new HfTokenizer(this.tokenizer);
  }

  /** The raw public prompt as token IDs: what goes up, with no template and no context. */
  publicPromptIds(prompt: string): number[] {
    return this.encode(prompt, false);
  }
}
