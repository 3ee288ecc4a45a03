#!/usr/bin/env node
// `npm run bench [-- --quick]`: runs every bench/*.bench.ts (bundled with esbuild
// against the real src/ modules) and writes bench/results/latest.json.
// Figures are ratios to a baseline measured in the same run; absolute times
// are reported too, for context only (this machine is noisy).
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { build } from "../scripts/build.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const quick = process.argv.includes("--quick");

await build();
const results = { date: new Date().toISOString(), node: process.version, quick };
for (const file of (await readdir(join(root, "bench"))).filter((f) => f.endsWith(".bench.ts")).sort()) {
  const out = await esbuild.build({
    entryPoints: [join(root, "bench", file)],
    bundle: true,
    format: "esm",
    platform: "node",
    write: false,
    logLevel: "silent",
  });
  const mod = await import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
  const name = file.replace(/\.bench\.ts$/, "");
  results[name] = await mod.run(quick);
  console.log(`${name}:`);
  for (const [metric, value] of Object.entries(results[name])) console.log(`  ${metric.padEnd(28)} ${JSON.stringify(value)}`);
}
await mkdir(join(root, "bench", "results"), { recursive: true });
await writeFile(join(root, "bench", "results", "latest.json"), `${JSON.stringify(results, null, 2)}\n`);
console.log("wrote bench/results/latest.json");
