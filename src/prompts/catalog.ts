/**
 * The bundled prompt files (generated from prompts/ at build time), looked up
 * by id. Pure data access: no I/O, no hashing at run time.
 */
import { BUNDLED_PROMPTS } from "../generated/prompts";
import type { BundledPrompt } from "./types";

const BY_ID: ReadonlyMap<string, BundledPrompt> = new Map(BUNDLED_PROMPTS.map((p) => [p.id, p]));

/** Id of the mandatory L1 prompt. */
export const BASE_PROMPT_ID = "base/sophie_base_prompt";

/** Every bundled prompt, sorted by file path. */
export function allPrompts(): readonly BundledPrompt[] {
  return BUNDLED_PROMPTS;
}

/** A bundled prompt by id (`channels/external_message`), or undefined. */
export function findPrompt(id: string): BundledPrompt | undefined {
  return BY_ID.get(id);
}

/** A bundled prompt by id; a missing one is a deployment error, not a user error. */
export function requirePrompt(id: string): BundledPrompt {
  const prompt = BY_ID.get(id);
  if (!prompt) throw new Error(`prompt ${id} is not bundled (expected a file prompts/${id}_v<N>.txt)`);
  return prompt;
}

/** `base/sophie_base_prompt` v1 → `SOPHIE_BASE_PROMPT_V1`. */
export function versionIdOf(prompt: Pick<BundledPrompt, "name" | "version">): string {
  return `${prompt.name.toUpperCase()}_V${prompt.version}`;
}

/** The base prompt (S1 §2.2–2.3): `{ versionId: "SOPHIE_BASE_PROMPT_V1", sha256, content }`. */
export function getBasePrompt(): { versionId: string; sha256: string; content: string } {
  const base = requirePrompt(BASE_PROMPT_ID);
  return { versionId: versionIdOf(base), sha256: base.sha256, content: base.content };
}
