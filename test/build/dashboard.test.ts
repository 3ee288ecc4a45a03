/**
 * The dashboard's browser code (src/dashboard/client/, served at /admin and /docs): it type-checks against the DOM
 * lib — the Worker's own tsconfig leaves it out, since workerd's types and the DOM's clash — and scripts/build.mjs
 * bundles it reproducibly into content-named assets.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { bundleDashboardAssets } from "../../scripts/build.mjs";

const root = join(import.meta.dirname, "..", "..");

describe("build: dashboard assets", () => {
  it("the browser client type-checks against the DOM lib (src/dashboard/client/tsconfig.json)", () => {
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
    const result = spawnSync(process.execPath, [tsc, "--noEmit", "-p", join(root, "src", "dashboard", "client", "tsconfig.json")], {
      cwd: root,
      encoding: "utf8",
    });
    expect(result.stdout + result.stderr).toBe("");
    expect(result.status).toBe(0);
  }, 60_000);

  it("each asset is named by its content: the first 16 hex of the sha256 of its UTF-8 bytes, with the SRI form of the same digest", async () => {
    const assets = (await bundleDashboardAssets()) as Record<
      string,
      { file: string; sha256: string; integrity: string; bytes: number; body: string }
    >;
    expect(Object.keys(assets).sort()).toEqual(["admin.css", "admin.js", "docs.css", "docs.js"]);
    for (const [name, a] of Object.entries(assets)) {
      const digest = createHash("sha256").update(Buffer.from(a.body, "utf8")).digest();
      expect(a.sha256).toBe(digest.toString("hex"));
      expect(a.integrity).toBe(`sha256-${digest.toString("base64")}`);
      expect(a.bytes).toBe(Buffer.byteLength(a.body, "utf8"));
      const [base, ext] = name.split(".");
      expect(a.file).toBe(`${base}.${a.sha256.slice(0, 16)}.${ext}`);
    }
  });

  it("is reproducible: two builds write byte-identical dashboard-assets.ts", () => {
    const build = () => {
      const out = join(mkdtempSync(join(tmpdir(), "sophie-dashboard-")), "generated");
      const result = spawnSync(process.execPath, [join(root, "scripts", "build.mjs"), "--out", out], { cwd: root, encoding: "utf8" });
      expect(result.status, result.stderr).toBe(0);
      return readFileSync(join(out, "dashboard-assets.ts"), "utf8");
    };
    expect(build()).toBe(build());
  });
});
