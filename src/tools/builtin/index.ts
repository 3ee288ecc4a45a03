/**
 * The gateway's built-in tools, registered into the shared registry when this
 * module is first imported. Registering again is a no-op, so tests and entry
 * points may both call `registerBuiltinTools()`.
 */
import { type ToolRegistry, tools } from "../registry";
import { emailDraft } from "./email";
import { fsListDir, fsReadText, fsWriteText } from "./fs";
import { httpGet } from "./http";
import { messageSend } from "./message";
import { S5_TOOLS } from "./s5";
import { shellExec } from "./shell";

export const BUILTIN_TOOLS = [fsListDir, fsReadText, fsWriteText, emailDraft, shellExec, httpGet, messageSend, ...S5_TOOLS] as const;

/** Adds every built-in tool to `registry` (the shared one by default); idempotent. */
export function registerBuiltinTools(registry: ToolRegistry = tools): ToolRegistry {
  // `register` accepts the same definition twice, so this is safe to repeat.
  for (const def of BUILTIN_TOOLS) registry.register(def);
  return registry;
}

registerBuiltinTools();
