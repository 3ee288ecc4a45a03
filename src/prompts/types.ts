/** Types shared by the prompt bundle (generated at build time) and the assembly code. */

/** The six layers of the prompt stack, in their fixed order (S2 §1.1). */
export type Layer = "L1" | "L2" | "L3" | "L4" | "L5" | "L6";

/** One prompt file as bundled by scripts/build.mjs. */
export interface BundledPrompt {
  /** `<folder>/<name>`, e.g. `channels/external_message`. */
  id: string;
  name: string;
  version: number;
  /** The layer its folder feeds: base → L1, agents → L2, channels → L3, tools → L4, tasks → L5. */
  layer: Layer;
  /** Repository path, e.g. `prompts/channels/external_message_v1.txt`. */
  file: string;
  bytes: number;
  /** SHA-256 (hex) of the file's exact bytes. */
  sha256: string;
  content: string;
}
