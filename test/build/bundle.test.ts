/**
 * The Worker bundle as a deploy uploads it (`wrangler deploy --dry-run`, offline, no account), built from a copy
 * of the project so the build step's rewrite of src/generated/ never touches the work tree. Its size against the
 * target is measured by `npm run bench` (bench/bundle.bench.ts); here, what it must not carry.
 */
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const SKIP = new Set(["node_modules", ".git", ".wrangler", "test-results", join("bench", "results")]);
const tmp = mkdtempSync(join(tmpdir(), "sophie-bundle-"));
/** The bundle's inputs (esbuild's metafile): every source module and its bytes in the output. */
let inputs: Record<string, { bytesInOutput: number }> = {};

beforeAll(() => {
  const work = join(tmp, "tree");
  cpSync(root, work, { recursive: true, filter: (src) => !SKIP.has(relative(root, src)) });
  symlinkSync(join(root, "node_modules"), join(work, "node_modules"), "dir");
  const { SOPHIE_CONFIG: _shipped, ...env } = process.env; // the shipped config, as a deploy bundles it
  const meta = join(tmp, "meta.json");
  const dry = spawnSync(
    join(root, "node_modules", ".bin", "wrangler"),
    ["deploy", "--dry-run", "--outdir", join(tmp, "dist"), "--metafile", meta],
    { cwd: work, env: { ...env, WRANGLER_SEND_METRICS: "false" }, encoding: "utf8", timeout: 180_000 },
  );
  if (dry.status !== 0) throw new Error(`wrangler deploy --dry-run failed:\n${dry.stdout}${dry.stderr}`);
  const outputs = JSON.parse(readFileSync(meta, "utf8")).outputs as Record<string, { inputs: typeof inputs }>;
  inputs = Object.assign({}, ...Object.values(outputs).map((o) => o.inputs));
}, 240_000);

afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("ISSUE23 bundle: what the Worker does not use stays out", () => {
  it("ISSUE23 zod is bundled through src/vendor/zod.ts with its English locale only", () => {
    const files = Object.keys(inputs);
    expect(files).toContain("src/vendor/zod.ts");
    const locales = files.filter((f) => /\/zod\/v4\/locales\//.test(f)).map((f) => f.replace(/^.*\/zod\//, "zod/"));
    expect(locales).toEqual(["zod/v4/locales/en.js"]);
  });
});
