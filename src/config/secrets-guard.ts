/**
 * Refuses credentials in configuration (S1 §1.2 "No secrets in config").
 *
 * Runs on the raw parsed file before the schema, so that `apiKey: "…"` is
 * reported as a secret (with where to put it instead) rather than as an
 * unknown key. Reports paths and the kind of credential, never the value.
 */
import { detectSecretValue, isSecretFieldName } from "../security/secret-patterns";
import { type ConfigIssue, formatPath } from "./issues";

/** Every place in `raw` where a credential is named or stored. */
export function findSecretsInConfig(raw: unknown): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  walk(raw, [], issues);
  return issues;
}

function walk(value: unknown, path: (string | number)[], issues: ConfigIssue[]): void {
  if (typeof value === "string") {
    const kind = detectSecretValue(value);
    if (kind) {
      issues.push({
        path: formatPath(path),
        message: `value looks like a credential (${kind}); secrets are not allowed in config — supply it as a Worker secret`,
      });
    }
    return;
  }
  if (Array.isArray(value)) {
    value.forEach((item, i) => {
      walk(item, [...path, i], issues);
    });
    return;
  }
  if (value !== null && typeof value === "object") {
    for (const [key, child] of Object.entries(value)) {
      const childPath = [...path, key];
      if (isSecretFieldName(key)) {
        issues.push({ path: formatPath(childPath), message: `secrets are not allowed in config — ${whereInstead(path)}` });
        continue;
      }
      walk(child, childPath, issues);
    }
  }
}

/** Where the credential belongs instead, as specific as the path allows. */
function whereInstead(parent: (string | number)[]): string {
  if (parent.length === 3 && parent[0] === "models" && parent[1] === "providers" && typeof parent[2] === "string") {
    return `set ${parent[2].toUpperCase()}_API_KEY as a Worker secret (wrangler secret put, or .dev.vars locally)`;
  }
  return "supply it as a Worker secret (wrangler secret put, or .dev.vars locally)";
}
