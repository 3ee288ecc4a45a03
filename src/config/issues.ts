/** Configuration problems as (path, message) pairs, and their one-line rendering. */

/** One thing wrong with a configuration, at a dotted path such as `models.providers.moonshot.baseUrl`. */
export interface ConfigIssue {
  path: string;
  message: string;
}

/** `["models","providers","my.p",0]` → `models.providers["my.p"][0]`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const seg of path) {
    if (typeof seg === "number") out += `[${seg}]`;
    else if (typeof seg === "string" && /^[A-Za-z_$][\w$-]*$/.test(seg)) out += out ? `.${seg}` : seg;
    else out += `[${JSON.stringify(String(seg))}]`;
  }
  return out || "(root)";
}

/** The single line an operator sees: what is wrong, where, and how many more problems follow. */
export function formatConfigIssues(source: string, issues: readonly ConfigIssue[]): string {
  const [first] = issues;
  if (!first) return `${source}: invalid configuration`;
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more problem${issues.length > 2 ? "s" : ""})` : "";
  return `${source}: ${first.path}: ${first.message}${more}`;
}
