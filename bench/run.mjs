#!/usr/bin/env node
// `npm run bench [-- --quick] [-- --peer]`: runs every bench/*.bench.ts (bundled with esbuild against the
// real src/ modules), writes bench/results/latest.json and ends with a table of the headline figures
// (docs/benchmarks.md). Rates are divided by the baseline Worker's (bench/baseline/), measured in the same
// run right before the turns; absolute times are for context only (this machine is noisy).
// --quick: fewer samples and shorter windows (target: under 60 s). --table: prints the last run's summary
// again. --peer: also runs the peer benchmark
// (Cloudflare's Agents SDK, /work/shared/peers) from a temporary copy and compares with it, instead of
// with its published figures; and the benches that measure the peer themselves (PEER_SELF) do so. When --only
// names only such benches, the peer's own benchmark is not run. A bench that fails is recorded as { error } and the run exits 1.
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
/** Benches that, given --peer, measure the peer beside themselves (bench/stream.bench.ts: the same slow model). */
const PEER_SELF = ["stream"];
const peerRun = peer && !only?.every((n) => PEER_SELF.includes(n));

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
// --quick runs the scheduler before the redaction bench, and starts the gateway benches' set-ups and the bundle
// bench beside the baseline's own start-up (BESIDE_FIRST below); the redaction curves run last, on a quiet machine.
const FIRST = ["baseline", "turn"];
const QUICK_LAST = ["scheduler", "redaction"];
const rank = (n) => {
  const first = FIRST.indexOf(n);
  if (first >= 0) return first;
  const last = quick ? QUICK_LAST.indexOf(n) : -1;
  return last >= 0 ? 100 + last : FIRST.length;
};
// Counted, not timed, and about a minute of vitest: the full run and --only=counts have it, --quick does not.
const FULL_ONLY = ["counts"];
const names = (await readdir(join(root, "bench")))
  .filter((f) => f.endsWith(".bench.ts"))
  .map((f) => f.replace(/\.bench\.ts$/, ""))
  .filter((n) => (only ? only.includes(n) : !(quick && FULL_ONLY.includes(n))))
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

/**
 * --quick: what starts beside the first bench (the baseline) — the gateway benches' set-ups (`prepare`; each
 * gateway gets its own model port) and the benches that time nothing (the bundle size). The baseline waits for
 * all of them (`settle`) before it measures, so its reference figures are taken beside idle servers only.
 */
const BESIDE_FIRST = quick ? { prepare: ["turn", "scheduler", "shipping"], run: ["bundle", "house"] } : { prepare: [], run: [] };
/** Started set-ups and background runs, by bench name; a rejected one is reported at that bench's turn. */
const prepared = new Map();
const background = new Map();
const settle = () => Promise.allSettled([...prepared.values(), ...background.values()]);
let failed = false;
for (const [i, name] of names.entries()) {
  if (i === 0) {
    for (const other of BESIDE_FIRST.prepare.filter((n) => names.includes(n))) {
      const mod = await load(other).catch(() => null); // a bench that does not build is reported at its turn
      if (typeof mod?.prepare !== "function") continue;
      const p = mod.prepare(quick);
      p.catch(() => {}); // awaited (and reported) by that bench's run
      prepared.set(other, p);
    }
    for (const other of BESIDE_FIRST.run.filter((n) => names.includes(n) && n !== name)) {
      const s0 = performance.now();
      const p = load(other).then((mod) => mod.run(quick));
      p.catch(() => {});
      background.set(
        other,
        p.finally(() => {
          timings[other] = Math.round((performance.now() - s0) / 100) / 10;
        }),
      );
    }
  }
  const s0 = performance.now();
  try {
    if (background.has(name)) results[name] = await background.get(name);
    else results[name] = await (await load(name)).run(quick, prepared.get(name), settle, { peer });
  } catch (err) {
    failed = true;
    results[name] = { error: err instanceof Error ? err.message : String(err) };
    console.error(`${name}: FAILED: ${results[name].error}`);
  }
  if (!background.has(name)) timings[name] = Math.round((performance.now() - s0) / 100) / 10;
  console.log(`${name} (${timings[name]} s${background.has(name) ? ", in the background from the start" : ""}):`);
  for (const [metric, value] of Object.entries(results[name])) console.log(`  ${metric.padEnd(28)} ${JSON.stringify(value)}`);
}

let peerFig = PEER_PUBLISHED;
if (peer && !peerRun)
  peerFig = {
    ...PEER_PUBLISHED,
    source: `${PEER_PUBLISHED.source.replace(/ \(not measured.*\)$/, "")}; --peer: measured by ${only.join(", ")} itself`,
  };
if (peerRun) {
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
