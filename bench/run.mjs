#!/usr/bin/env node
// `npm run bench [-- --quick] [-- --peer]`: runs every bench/*.bench.ts (bundled with esbuild against the
// real src/ modules), writes bench/results/latest.json and ends with a table of the headline figures
// (docs/benchmarks.md). Rates are divided by the baseline Worker's (bench/baseline/), measured in the same
// run right before the turns; absolute times are for context only (this machine is noisy).
// --quick: fewer samples and shorter windows (target: under 60 s). --table: prints the last run's summary
// again. --peer: also runs the peer benchmark
// (Cloudflare's Agents SDK, /work/shared/peers) from a temporary copy and compares with it, instead of
// with its published figures. A bench that fails is recorded as { error } and the run exits 1.
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { build } from "../scripts/build.mjs";
import { PEER_PUBLISHED, peerFigures, runPeer, summarise, table } from "./support/report.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const quick = process.argv.includes("--quick");
const peer = process.argv.includes("--peer");
const only = process.argv
  .find((a) => a.startsWith("--only="))
  ?.slice("--only=".length)
  .split(",");
const t0 = performance.now();

// --table: print the summary of the last run again (bench/results/latest.json), without measuring.
if (process.argv.includes("--table")) {
  const { readFile } = await import("node:fs/promises");
  const last = JSON.parse(await readFile(join(root, "bench", "results", "latest.json"), "utf8"));
  const fig = last.peer && !last.peer.error ? peerFigures(last.peer) : PEER_PUBLISHED;
  const rows = summarise(last, fig);
  const wallRow = last.summary?.rows?.find((x) => /wall time/.test(x.figure));
  if (wallRow) rows.push(wallRow);
  console.log(`Summary (${last.quick ? "--quick, " : ""}${last.date}; peer figures ${fig.source}):\n`);
  console.log(table(rows));
  process.exit(0);
}

await build();
const results = { date: new Date().toISOString(), node: process.version, quick };
const timings = {};
// The baseline and the turns run back to back (closest in time), then the rest in name order — except that
// --quick runs the scheduler before the redaction bench and overlaps the gateway benches' start-ups (their
// `prepare`: project copy, D1 schema, wrangler dev) with other work: the turn bench's with the baseline's own
// start-up (the baseline waits for it before measuring: its reference figures are taken beside idle servers
// only), the scheduler's with the benches that time nothing (bundle size) or only compare their own
// samples (context 10,000 ÷ 100, prompt assembly ÷ one SHA-256). The redaction curves run on a quiet machine again.
const FIRST = ["baseline", "turn"];
const QUICK_LAST = ["scheduler", "redaction"];
const rank = (n) => {
  const first = FIRST.indexOf(n);
  if (first >= 0) return first;
  const last = quick ? QUICK_LAST.indexOf(n) : -1;
  return last >= 0 ? 100 + last : FIRST.length;
};
const names = (await readdir(join(root, "bench")))
  .filter((f) => f.endsWith(".bench.ts"))
  .map((f) => f.replace(/\.bench\.ts$/, ""))
  .filter((n) => !only || only.includes(n))
  .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));

/** A bench module, bundled with esbuild against the real src/ modules and imported from a data: URL. */
const modules = new Map();
async function load(name) {
  if (!modules.has(name)) {
    const out = await esbuild.build({
      entryPoints: [join(root, "bench", `${name}.bench.ts`)],
      bundle: true,
      format: "esm",
      platform: "node",
      write: false,
      logLevel: "silent",
    });
    modules.set(name, await import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`));
  }
  return modules.get(name);
}

/** --quick: whose set-up (`prepare`) starts when which bench starts. */
const PREPARE_BESIDE = quick ? { baseline: "turn", bundle: "scheduler" } : {};
/** Started set-ups, by bench name; a rejected one is reported by that bench's run. */
const prepared = new Map();
const settle = () => Promise.allSettled([...prepared.values()]);
let failed = false;
for (const name of names) {
  const s0 = performance.now();
  const beside = PREPARE_BESIDE[name];
  if (beside && names.includes(beside)) {
    try {
      const mod = await load(beside);
      if (typeof mod.prepare === "function") {
        const p = mod.prepare(quick);
        p.catch(() => {}); // awaited (and reported) by that bench's run
        prepared.set(beside, p);
      }
    } catch {
      // A bench that does not build is reported when its turn comes.
    }
  }
  try {
    const mod = await load(name);
    results[name] = await mod.run(quick, prepared.get(name), settle);
  } catch (err) {
    failed = true;
    results[name] = { error: err instanceof Error ? err.message : String(err) };
    console.error(`${name}: FAILED: ${results[name].error}`);
  }
  timings[name] = Math.round((performance.now() - s0) / 100) / 10;
  console.log(`${name} (${timings[name]} s):`);
  for (const [metric, value] of Object.entries(results[name])) console.log(`  ${metric.padEnd(28)} ${JSON.stringify(value)}`);
}

let peerFig = PEER_PUBLISHED;
if (peer) {
  const s0 = performance.now();
  try {
    results.peer = await runPeer();
    peerFig = peerFigures(results.peer);
  } catch (err) {
    failed = true;
    results.peer = { error: err instanceof Error ? err.message : String(err) };
    console.error(`peer: FAILED (${results.peer.error}); comparing with the published figures`);
  }
  timings.peer = Math.round((performance.now() - s0) / 100) / 10;
}

const wall = Math.round((performance.now() - t0) / 100) / 10;
const rows = summarise(results, peerFig);
if (quick) rows.push({ figure: "--quick wall time", ours: wall, unit: "s", target: "≤ 60", pass: wall <= 60 });
else rows.push({ figure: "wall time", ours: wall, unit: "s" });
results.summary = { peer_figures: peerFig, rows };
results.timings_s = { ...timings, total: wall };
await mkdir(join(root, "bench", "results"), { recursive: true });
await writeFile(join(root, "bench", "results", "latest.json"), `${JSON.stringify(results, null, 2)}\n`);
console.log(`\nSummary (${quick ? "--quick, " : ""}${results.date}; peer figures ${peerFig.source}):\n`);
console.log(table(rows));
console.log(`\nper bench (s): ${JSON.stringify(timings)}\nwrote bench/results/latest.json`);
// Exit now: idle keep-alive sockets to the servers the benches stopped would hold the process for seconds more.
process.exit(failed ? 1 : 0);
