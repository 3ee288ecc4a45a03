/**
 * Prompt bundling at build time (scripts/build.mjs): file naming, one version
 * per id, a mandatory base prompt, SHA-256 over exact bytes, reproducible output.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");

/** A copy of prompts/ in a temp dir, changed by `edit`, then built; returns the result. */
function buildWith(edit: (dir: string) => void) {
  const dir = mkdtempSync(join(tmpdir(), "sophie-prompts-"));
  const prompts = join(dir, "prompts");
  cpSync(join(root, "prompts"), prompts, { recursive: true });
  edit(prompts);
  const out = join(dir, "generated");
  const result = spawnSync(process.execPath, [join(root, "scripts", "build.mjs"), "--prompts", prompts, "--out", out], {
    cwd: dir,
    encoding: "utf8",
  });
  return { ...result, out };
}

describe("build: prompt bundling", () => {
  it("hashes each file's exact bytes, including CRLF line endings (no normalisation)", () => {
    const crlf = "Agent role: crlf\r\nKeep these bytes.\r\n";
    const result = buildWith((p) => writeFileSync(join(p, "agents", "crlf_v1.txt"), crlf));
    expect(result.status).toBe(0);
    const generated = readFileSync(join(result.out, "prompts.ts"), "utf8");
    const expected = createHash("sha256").update(Buffer.from(crlf)).digest("hex");
    expect(generated).toContain(`"sha256": "${expected}"`);
    expect(generated).toContain(JSON.stringify(crlf));
  });

  it("is reproducible: the same tree gives byte-identical output", () => {
    const a = buildWith(() => {});
    const b = buildWith(() => {});
    expect(readFileSync(join(a.out, "prompts.ts"), "utf8")).toBe(readFileSync(join(b.out, "prompts.ts"), "utf8"));
  });

  const failures: [string, (p: string) => void, string][] = [
    [
      "a misnamed file",
      (p) => writeFileSync(join(p, "tools", "Native.txt"), "x"),
      "build failed: prompts/tools/Native.txt: prompt files are named <name>_v<N>.txt (lower-case name)",
    ],
    [
      "two versions of one id",
      (p) => writeFileSync(join(p, "agents", "main_v2.txt"), "Agent role: main v2"),
      "build failed: prompts/agents/main_v2.txt: a second version of agents/main; keep only the current one (history lives in git and prompts/CHANGELOG.md)",
    ],
    [
      "an empty prompt",
      (p) => writeFileSync(join(p, "tasks", "blank_v1.txt"), "  \n"),
      "build failed: prompts/tasks/blank_v1.txt: empty prompt",
    ],
    [
      "ISSUE33 a prompt file with credential-shaped text (hidden layers must never hold a secret; the value is not echoed)",
      (p) =>
        writeFileSync(
          join(p, "agents", "leaky_v1.txt"),
          "Agent role: leaky\nUse the key sk-proj-abcdefghijklmnopqrstuvwx to call billing.\n",
        ),
      "build failed: prompts/agents/leaky_v1.txt: line 2 holds credential-shaped text (openai_style_key); hidden layers must never hold a secret",
    ],
    [
      "invalid UTF-8",
      (p) => writeFileSync(join(p, "tasks", "bad_v1.txt"), Buffer.from([0xff, 0xfe, 0x41])),
      "build failed: prompts/tasks/bad_v1.txt: not valid UTF-8",
    ],
    [
      "no base prompt",
      (p) => rmSync(join(p, "base", "sophie_base_prompt_v1.txt")),
      "build failed: prompts/base/sophie_base_prompt_v1.txt is missing: L1 is mandatory",
    ],
  ];
  for (const [name, edit, line] of failures) {
    it(`${name} → exit 1 with one line`, () => {
      const result = buildWith(edit);
      expect(result.status).toBe(1);
      expect(result.stderr).toBe(`${line}\n`);
    });
  }
});
