/**
 * Bundle size: `wrangler deploy --dry-run --outdir <tmp>` (offline, no account)
 * builds exactly what a deploy would upload; every output module is gzipped
 * here with node:zlib (level 9, as wrangler estimates it) and the sizes summed.
 * Target: ≤ 330 KiB gzipped (half the peer's 661 KiB). wrangler's own
 * `Total Upload: … / gzip: …` line is reported beside ours.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";
import { projectRoot, round, snapshotProject } from "./support/devserver";

const TAG = "bundle bench";
export const TARGET_GZIP_KIB = 330;
export const PEER_GZIP_KIB = 661.32;

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

export async function run(_quick: boolean) {
  const root = projectRoot(TAG);
  const out = mkdtempSync(join(tmpdir(), "sophie-bundle-bench-"));
  const { SOPHIE_CONFIG: _drop, ...env } = process.env; // the shipped config, as a deploy would bundle it
  try {
    // From a copy of the tree: the build step rewrites src/generated/, which a `wrangler dev` running in the
    // working tree (another bench, npm start) would reload on.
    const work = snapshotProject(root, join(out, "tree"));
    const dist = join(out, "dist");
    const dry = spawnSync(join(root, "node_modules", ".bin", "wrangler"), ["deploy", "--dry-run", "--outdir", dist], {
      cwd: work,
      env: { ...env, WRANGLER_SEND_METRICS: "false" },
      encoding: "utf8",
      timeout: 120_000,
    });
    const log = `${dry.stdout}${dry.stderr}`;
    if (dry.status !== 0) throw new Error(`${TAG}: wrangler deploy --dry-run failed:\n${log}`);
    // Modules only: source maps and the README wrangler may write are not uploaded as code.
    const modules = filesUnder(dist).filter((f) => /\.(m?js|cjs|wasm|bin|txt|html|sql)$/.test(f) && !f.endsWith(".map"));
    if (modules.length === 0) throw new Error(`${TAG}: wrangler wrote no module to ${dist}:\n${log}`);
    const files = modules.map((f) => {
      const bytes = readFileSync(f);
      return {
        file: relative(dist, f),
        kib: round(bytes.length / 1024, 2),
        gzip_kib: round(gzipSync(bytes, { level: 9 }).length / 1024, 2),
      };
    });
    const gzipKib = round(
      files.reduce((a, f) => a + f.gzip_kib, 0),
      2,
    );
    const line = log.match(/Total Upload:\s*([\d.]+)\s*KiB\s*\/\s*gzip:\s*([\d.]+)\s*KiB/);
    return {
      gzip_kib: gzipKib,
      raw_kib: round(
        files.reduce((a, f) => a + f.kib, 0),
        2,
      ),
      target_gzip_kib: TARGET_GZIP_KIB,
      pass: gzipKib <= TARGET_GZIP_KIB,
      peer_gzip_kib: PEER_GZIP_KIB,
      ratio_to_peer: round(gzipKib / PEER_GZIP_KIB, 2),
      wrangler_total_upload_kib: line ? Number(line[1]) : null,
      wrangler_gzip_kib: line ? Number(line[2]) : null,
      files,
    };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}
