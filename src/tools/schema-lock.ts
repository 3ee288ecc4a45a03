/**
 * The schema-drift guard (issue: "a change to an allowlisted tool's schema turns its policy decision into
 * requires approval until the policy is updated"). `config/tool-schemas.lock.json` pins the SHA-256 of each
 * tool's JSON Schema as reviewed with the policy; the build bundles it. A tool whose current schema hashes
 * differently needs a human approval for every call until `npm run tools:lock` records the new schema.
 */
import { TOOL_SCHEMA_LOCK } from "../generated/tool-lock";
import { sha256Hex } from "../prompts/hash";
import type { ToolDefinition } from "./registry";

const hashes = new WeakMap<ToolDefinition, Promise<string>>();

/** SHA-256 of a tool's JSON Schema (as the model sees it), once per definition. */
export function schemaHash(def: Pick<ToolDefinition, "parameters">): Promise<string> {
  let hash = hashes.get(def as ToolDefinition);
  if (!hash) {
    hash = sha256Hex(JSON.stringify(def.parameters));
    hashes.set(def as ToolDefinition, hash);
  }
  return hash;
}

/** The hash the lock pins for `tool`, if the tool is locked. */
export function lockedSchemaHash(tool: string): string | undefined {
  return Object.hasOwn(TOOL_SCHEMA_LOCK, tool) ? TOOL_SCHEMA_LOCK[tool] : undefined;
}
