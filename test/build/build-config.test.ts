/**
 * The build step (scripts/build.mjs) runs in Node, so this suite does too:
 * an invalid bundled config fails the build with ONE line saying what and
 * where; a valid one produces byte-identical output on every run.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const shipped = readFileSync(join(root, "config", "gateway.json5"), "utf8");

function runBuild(configText: string) {
  const dir = mkdtempSync(join(tmpdir(), "sophie-build-"));
  const configFile = join(dir, "gateway.json5");
  writeFileSync(configFile, configText);
  const out = join(dir, "generated");
  const result = spawnSync(process.execPath, [join(root, "scripts", "build.mjs"), "--config", configFile, "--out", out], {
    cwd: dir,
    encoding: "utf8",
  });
  return { ...result, out };
}

describe("build: invalid bundled config fails the build", () => {
  const cases: [string, string, string][] = [
    [
      "an unknown key",
      shipped.replace("logging: {", "logging: {\n    colour: 'blue',"),
      "build failed: gateway.json5: logging.colour: unknown key (configuration is strict: unknown keys are rejected)",
    ],
    [
      "a secret",
      shipped.replace(
        'baseUrl: "https://api.moonshot.cn/v1",',
        'baseUrl: "https://api.moonshot.cn/v1",\n        apiKey: "sk-live-do-not-commit-0123456789abcdef",',
      ),
      "build failed: gateway.json5: models.providers.moonshot.apiKey: secrets are not allowed in config — set MOONSHOT_API_KEY as a Worker secret (wrangler secret put, or .dev.vars locally)",
    ],
    [
      "a dangling default",
      shipped.replace('default: "moonshot:kimi-k1-128k"', 'default: "moonshot:kimi-k2"'),
      'build failed: gateway.json5: models.default: unknown model "kimi-k2" for provider "moonshot"',
    ],
    [
      "a JSON5 syntax error",
      "{ models: { providers: {} ",
      "build failed: gateway.json5: line 1, column 27: not valid JSON5 (invalid end of input)",
    ],
  ];
  for (const [name, text, line] of cases) {
    it(`${name} → exit 1 and exactly one line on stderr`, () => {
      const result = runBuild(text);
      expect(result.status).toBe(1);
      expect(result.stderr).toBe(`${line}\n`);
      expect(result.stderr).not.toContain("sk-live-do-not-commit");
    });
  }
});

describe("build: reproducible output", () => {
  it("the shipped config builds, and the generated module is byte-identical across runs", () => {
    const first = runBuild(shipped);
    const second = runBuild(shipped);
    expect(first.status).toBe(0);
    expect(second.status).toBe(0);
    const a = readFileSync(join(first.out, "config.ts"), "utf8");
    const b = readFileSync(join(second.out, "config.ts"), "utf8");
    expect(a).toBe(b);
    expect(a).toContain('"default": "moonshot:kimi-k1-128k"');
  });
});
