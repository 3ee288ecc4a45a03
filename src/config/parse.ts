/**
 * Turns untrusted configuration input into a `GatewayConfig`, or says exactly
 * what is wrong and where. Used at build time (scripts/build.mjs) on the
 * bundled file, at isolate start on the bundled copy, and later on configs
 * posted by admins — the same rules everywhere.
 */
import type { z } from "zod";
import { type ConfigIssue, formatPath } from "./issues";
import { defaultModelRef, ModelRefError, resolveConfiguredModelRef } from "./model-ref";
import { GatewayConfig } from "./schema";
import { findSecretsInConfig } from "./secrets-guard";

export type ConfigResult = { ok: true; value: GatewayConfig } | { ok: false; issues: ConfigIssue[] };

/** Validates raw configuration: secrets first, then the strict schema, then cross-references. */
export function parseGatewayConfig(raw: unknown): ConfigResult {
  const secrets = findSecretsInConfig(raw);
  if (secrets.length > 0) return { ok: false, issues: secrets };

  const parsed = GatewayConfig.safeParse(raw, { reportInput: true });
  if (!parsed.success) return { ok: false, issues: parsed.error.issues.flatMap(zodIssue) };

  const config = parsed.data;
  const issues: ConfigIssue[] = [];
  try {
    resolveConfiguredModelRef(config, defaultModelRef(config));
  } catch (err) {
    if (!(err instanceof ModelRefError)) throw err;
    issues.push({ path: "models.default", message: err.message });
  }
  for (const [agentId, agent] of Object.entries(config.agents)) {
    if (agent.model === undefined) continue;
    try {
      resolveConfiguredModelRef(config, agent.model);
    } catch (err) {
      if (!(err instanceof ModelRefError)) throw err;
      issues.push({ path: formatPath(["agents", agentId, "model"]), message: err.message });
    }
  }
  for (const [alias, agentId] of Object.entries(config.openai.aliases)) {
    if (!Object.hasOwn(config.agents, agentId))
      issues.push({ path: formatPath(["openai", "aliases", alias]), message: `no agent "${agentId}" (aliases name agents)` });
  }
  return issues.length > 0 ? { ok: false, issues } : { ok: true, value: config };
}

/** Zod issues as config issues; unknown keys get one issue per key, named. */
function zodIssue(issue: z.core.$ZodIssue): ConfigIssue[] {
  if (issue.code === "unrecognized_keys") {
    return issue.keys.map((key) => ({
      path: formatPath([...issue.path, key]),
      message: "unknown key (configuration is strict: unknown keys are rejected)",
    }));
  }
  if (issue.code === "invalid_key") {
    // A record key failed its schema (e.g. a provider id); say what the key must look like.
    return [{ path: formatPath(issue.path), message: issue.issues[0]?.message ?? issue.message }];
  }
  if (issue.code === "invalid_type" && issue.input === undefined) {
    return [{ path: formatPath(issue.path), message: "required" }];
  }
  return [{ path: formatPath(issue.path), message: issue.message }];
}
