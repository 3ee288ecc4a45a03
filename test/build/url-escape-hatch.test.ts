/**
 * Issue 33 (D-088): the outbound URL check's one escape hatch — `.test` names for the test suite's mock network —
 * is shut wherever the gateway runs. Here, in Node with no test setup file, the module answers as production does;
 * and no file under src/ or scripts/ calls `allowTestTldForTests` (only its definition names it), so no config,
 * secret or request can open it: only test/support/test-hosts.ts does, inside the workers test isolates.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { checkPublicHttpsUrl, checkUrl } from "../../src/tools/net-policy.ts";

const root = join(import.meta.dirname, "..", "..");

/** Every source file under `dir` (relative to the project root). */
function sources(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (name === "generated" || name === "node_modules") return [];
    if (statSync(join(root, path)).isDirectory()) return sources(path);
    return /\.(ts|mts|mjs|js|tsx)$/.test(name) ? [path] : [];
  });
}

/** A line without its comment (a doc comment naming the function is no call; an import or a call is). */
const code = (line: string) => (/^\s*(\*|\/\*|\/\/)/.test(line) ? "" : line.replace(/\/\/.*$/, ""));

describe("ISSUE33 urls: the .test escape hatch is shut outside the tests", () => {
  it("ISSUE33 urls: without the test setup, *.test is refused as a special-use name (the production answer)", () => {
    expect(checkUrl("https://ok.hook.test/in")).toEqual({ ok: false, reason: "special_use_name" });
    expect(checkPublicHttpsUrl("https://api.telegram.test")).toEqual({
      ok: false,
      problem: "must not use a special-use domain name (.test, .example, .invalid, .onion, .alt)",
    });
  });

  it("ISSUE33 urls: no file under src/ or scripts/ imports or calls allowTestTldForTests; only its definition names it in code", () => {
    const named = [...sources("src"), ...sources("scripts")].flatMap((file) =>
      readFileSync(join(root, file), "utf8")
        .split("\n")
        .flatMap((line, i) => (code(line).includes("allowTestTldForTests") ? [`${relative(".", file)}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(named).toEqual([
      expect.stringMatching(/^src\/tools\/net-policy\.ts:\d+: export function allowTestTldForTests\(on: boolean\): void \{$/),
    ]);
  });
});
