/**
 * The hash-only prompt manifest of every turn (S2 §3) and the stack hash rule
 * (DESIGN §2): SHA-256 of the lines `"{layer}|{id}|{sha256}"` joined by "\n".
 */
import { z } from "zod";
import { sha256Hex } from "./hash";

/** Format version of the manifest object itself. */
export const MANIFEST_VERSION = "1";

const Sha256 = z.string().regex(/^[a-f0-9]{64}$/);

export const ManifestEntry = z.strictObject({
  layer: z.enum(["L1", "L2", "L3", "L4", "L5", "L6"]),
  id: z.string().min(1),
  file: z.string().min(1),
  sha256: Sha256,
  bytes: z.int().min(0),
  tokens_est: z.int().min(0),
  source: z.enum(["file", "inline", "user"]),
});
export type ManifestEntry = z.infer<typeof ManifestEntry>;

export const PromptManifest = z.strictObject({
  version: z.string(),
  stack: z.array(ManifestEntry).min(5),
  stack_sha256: Sha256,
  notes: z.array(z.string()),
});
export type PromptManifest = z.infer<typeof PromptManifest>;

/** The stack hash: order, presence and content of every layer in one value. */
export function stackSha256(stack: readonly Pick<ManifestEntry, "layer" | "id" | "sha256">[]): Promise<string> {
  return sha256Hex(stack.map((e) => `${e.layer}|${e.id}|${e.sha256}`).join("\n"));
}
