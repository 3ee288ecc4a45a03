#!/usr/bin/env node
// `npm run bench:profile [-- --turns N --chat N --tool N --healthz N --interval-us N --no-measure --tree DIR]`
//
// Where a turn's CPU goes: the real Worker under `wrangler dev` (workerd, local
// Durable Objects, R2, D1) against the offline model (scripts/local-model.mjs,
// served from this process on a free port through a temporary copy of
// config/gateway.dev.json5), profiled through workerd's V8 inspector (Chrome
// DevTools Protocol `Profiler.*` over wrangler's inspector proxy, `--inspector-port`).
//
// Phases, each profiled separately after a warm-up: N plain `POST /v1/runs`
// with `Prefer: wait=30`; N chat turns in ONE session (`POST /v1/chat/messages`
// then its SSE event stream to the end); N turns of one conversation through
// `POST /v1/chat/completions`, and N over one WebSocket (`GET /v1/chat/socket`,
// a message frame per turn, until its run frame; --chat N sets both); N tool-round
// turns in ONE long-lived conversation through `POST /v1/chat/completions`
// ("list files": the model calls fs.list_dir, then answers from its result);
// N `GET /healthz`. The Worker and its
// Durable Objects run in the same workerd isolate under wrangler dev (one
// `core:user:<name>` inspector target; /json lists it), so one profile covers
// the HTTP side and the SessionDO where runs execute.
//
// Output: bench/results/profile-<phase>.cpuprofile (open in Chrome DevTools →
// Performance, or speedscope) and a summary: sampled ms per request, the top
// functions by self and total time with their src/ file:line (mapped back
// through the source map wrangler writes next to its bundle), and self time by
// module. Then (unless --no-measure) the same quick figures as the turn bench,
// unprofiled: sequential medians, turns/s at 8 concurrent, workerd CPU/turn.
//
// The gateway is set up as the turn bench's is (bench/support/devserver.ts
// startGatewayBench, bundled here with esbuild): a copy of the project in a
// temporary directory (node_modules linked), so that neither wrangler's build
// step (it writes src/generated/) nor anyone editing or building in the working
// tree meanwhile can change the Worker under measurement.
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import * as esbuild from "esbuild";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** Where the Worker runs from: a copy of the project (set below). */
let tree = root;
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const TURNS = opt("turns", 100);
const CHAT = opt("chat", 50);
const TOOL = opt("tool", 50);
const HEALTHZ = opt("healthz", 200);
const INTERVAL_US = opt("interval-us", 100);
const TOP = opt("top", 30);
const MEASURE = !args.includes("--no-measure");
// --tree DIR: run another copy of the project (e.g. `git archive HEAD | tar -x -C DIR`, for a before/after
// under the same machine load); node_modules, the model and the results stay this project's.
const source = args.includes("--tree") ? resolve(args[args.indexOf("--tree") + 1]) : root;
const WARMUP = 20;
const CONCURRENCY = 8;

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const r1 = (x) => Math.round(x * 10) / 10;

/** The bench helpers (bench/support/devserver.ts), bundled with esbuild like bench/run.mjs bundles the benches. */
async function benchHelpers() {
  const out = await esbuild.build({
    entryPoints: [join(root, "bench", "support", "devserver.ts")],
    bundle: true,
    format: "esm",
    platform: "node",
    write: false,
    logLevel: "silent",
  });
  return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}

/** One conversation's socket (GET /v1/chat/socket, the token as the browser-style subprotocol): `turn()` sends a message frame and resolves with its run frame. */
async function openSocket(base, token, user) {
  const url = `${base.replace(/^http/, "ws")}/v1/chat/socket?agent_id=main&room_id=profile-ws&user_id=${user}`;
  const ws = new WebSocket(url, ["sophie.v1", `bearer.${Buffer.from(token).toString("base64url")}`]);
  await new Promise((resolve, reject) => {
    ws.addEventListener("open", resolve, { once: true });
    ws.addEventListener("error", () => reject(new Error(`profile: could not open ${url}`)), { once: true });
  });
  const waiting = new Map();
  ws.addEventListener("message", (e) => {
    const frame = JSON.parse(String(e.data));
    const w = waiting.get(frame.id);
    if (!w || (frame.type !== "run" && frame.type !== "error")) return;
    waiting.delete(frame.id);
    if (frame.type === "run") w.resolve(frame.run);
    else w.reject(new Error(`profile: error frame ${JSON.stringify(frame)}`));
  });
  let next = 0;
  return {
    turn() {
      const id = `p${next++}`;
      const done = new Promise((resolve, reject) => waiting.set(id, { resolve, reject }));
      ws.send(JSON.stringify({ type: "message", id, text: "hello" }));
      return done;
    },
    close: () => ws.close(),
  };
}

// ---------------------------------------------------------------- source maps

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_INDEX = new Map([...B64].map((ch, i) => [ch, i]));

/** Decodes a v3 source map's `mappings` into per-generated-line arrays of [genCol, srcIdx, srcLine, srcCol]. */
function decodeSourceMap(map) {
  const lines = [];
  let srcIdx = 0;
  let srcLine = 0;
  let srcCol = 0;
  for (const lineText of map.mappings.split(";")) {
    const segs = [];
    let genCol = 0;
    for (const seg of lineText.split(",")) {
      if (!seg) continue;
      const vals = [];
      let value = 0;
      let shift = 0;
      for (const ch of seg) {
        const digit = B64_INDEX.get(ch);
        value += (digit & 31) << shift;
        if (digit & 32) shift += 5;
        else {
          vals.push(value & 1 ? -(value >>> 1) : value >>> 1);
          value = 0;
          shift = 0;
        }
      }
      genCol += vals[0];
      if (vals.length >= 4) {
        srcIdx += vals[1];
        srcLine += vals[2];
        srcCol += vals[3];
        segs.push([genCol, srcIdx, srcLine, srcCol]);
      }
    }
    lines.push(segs);
  }
  return lines;
}

/** A lookup (generated 0-based line/col → "src/file.ts:line") for the bundle at `bundlePath`, or null. */
function sourceMapper(bundlePath) {
  const mapPath = `${bundlePath}.map`;
  if (!existsSync(mapPath)) return null;
  const map = JSON.parse(readFileSync(mapPath, "utf8"));
  const lines = decodeSourceMap(map);
  const base = dirname(mapPath);
  const sources = map.sources.map((s) => {
    const abs = resolve(base, map.sourceRoot ?? "", s.replace(/^file:\/\//, ""));
    return relative(tree, abs);
  });
  return (line, col) => {
    const segs = lines[line];
    if (!segs?.length) return null;
    let best = segs[0];
    for (const s of segs) {
      if (s[0] <= col) best = s;
      else break;
    }
    return { file: sources[best[1]], line: best[2] + 1 };
  };
}

/** The newest bundle wrangler dev wrote (.wrangler/tmp/dev-*\/<entry>.js with a .map). */
function findBundle() {
  const tmp = join(tree, ".wrangler", "tmp");
  if (!existsSync(tmp)) return null;
  let newest = null;
  for (const dir of readdirSync(tmp).filter((d) => d.startsWith("dev-"))) {
    for (const f of readdirSync(join(tmp, dir)).filter((f) => f.endsWith(".js") && existsSync(join(tmp, dir, `${f}.map`)))) {
      const p = join(tmp, dir, f);
      const m = statSync(p).mtimeMs;
      if (!newest || m > newest.m) newest = { p, m };
    }
  }
  return newest?.p ?? null;
}

// ---------------------------------------------------------------- CDP

/** A minimal Chrome DevTools Protocol client over Node 22's global WebSocket. */
async function cdpConnect(url) {
  // wrangler's inspector proxy wants an Origin of localhost (or no User-Agent); undici's WebSocket takes headers.
  const ws = new WebSocket(url, { headers: { origin: "http://localhost" } });
  await new Promise((res, rej) => {
    ws.addEventListener("open", () => res(), { once: true });
    ws.addEventListener("error", (e) => rej(new Error(`inspector: ${e.message ?? "websocket error"}`)), { once: true });
  });
  let id = 0;
  const pending = new Map();
  ws.addEventListener("message", (ev) => {
    const msg = JSON.parse(typeof ev.data === "string" ? ev.data : Buffer.from(ev.data).toString("utf8"));
    if (msg.id !== undefined && pending.has(msg.id)) {
      const { res, rej } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) rej(new Error(`${msg.error.message}`));
      else res(msg.result);
    }
  });
  return {
    send(method, params = {}) {
      const mid = ++id;
      ws.send(JSON.stringify({ id: mid, method, params }));
      return new Promise((res, rej) => pending.set(mid, { res, rej }));
    },
    close() {
      ws.close();
    },
  };
}

// ---------------------------------------------------------------- summary

function moduleOf(file) {
  if (!file) return "(no source)";
  const nm = file.lastIndexOf("node_modules/");
  if (nm >= 0) {
    const rest = file.slice(nm + "node_modules/".length).split("/");
    return `npm:${rest[0].startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  return file;
}

/** Self/total time per function and self time per module from a .cpuprofile. */
function summarize(profile, mapper, requests, label) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map();
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i + 1] ?? 0; // the time until the next sample belongs to this one
    selfUs.set(profile.samples[i], (selfUs.get(profile.samples[i]) ?? 0) + dt);
  }
  const where = new Map();
  const keyOf = (node) => {
    const cf = node.callFrame;
    const name = cf.functionName || "(anonymous)";
    let loc = where.get(node.id);
    if (loc === undefined) {
      const m = mapper && cf.lineNumber >= 0 ? mapper(cf.lineNumber, cf.columnNumber) : null;
      loc = m ? `${m.file}:${m.line}` : cf.url ? `${cf.url.split("/").pop()}:${cf.lineNumber + 1}` : "";
      where.set(node.id, loc);
    }
    return { key: `${name} ${loc}`, module: moduleOf(loc.replace(/:\d+$/, "")) || "(native)", name };
  };
  const self = new Map();
  const total = new Map();
  // Native leaves (SQLite exec, R2 put, console.log, alarm calls: no script url) charged to their nearest JS caller.
  const nativeBy = new Map();
  const modules = new Map();
  let all = 0;
  let idle = 0;
  for (const [nodeId, us] of selfUs) {
    const node = byId.get(nodeId);
    const { key, module, name } = keyOf(node);
    all += us;
    if (name === "(idle)" || name === "(program)" || name === "(garbage collector)") {
      if (name === "(idle)") idle += us;
    }
    self.set(key, (self.get(key) ?? 0) + us);
    if (!node.callFrame.url && !["(idle)", "(program)", "(garbage collector)", "(root)"].includes(name)) {
      let caller = parent.get(nodeId);
      // Past the SQL helper too (src/storage/sql.ts): which query site, not which helper, pays for SQLite.
      const helper = (id) => !byId.get(id).callFrame.url || keyOf(byId.get(id)).module === "src/storage/sql.ts";
      while (caller !== undefined && helper(caller)) caller = parent.get(caller);
      const k = `${name} ← ${caller === undefined ? "(root)" : keyOf(byId.get(caller)).key}`;
      nativeBy.set(k, (nativeBy.get(k) ?? 0) + us);
    }
    modules.set(module, (modules.get(module) ?? 0) + us);
    const seen = new Set();
    for (let id = nodeId; id !== undefined; id = parent.get(id)) {
      const k = keyOf(byId.get(id)).key;
      if (seen.has(k)) continue;
      seen.add(k);
      total.set(k, (total.get(k) ?? 0) + us);
    }
  }
  const busy = all - idle;
  const ms = (us) => (us / 1000).toFixed(1).padStart(8);
  const pct = (us) => `${((100 * us) / busy).toFixed(1).padStart(5)}%`;
  console.log(
    `\n=== ${label}: ${requests} requests, ${(busy / 1000).toFixed(0)} ms sampled busy (idle excluded) = ${r1(busy / 1000 / requests)} ms/request`,
  );
  const top = (m, title) => {
    console.log(`\n  top ${TOP} by ${title} (ms total, % of busy, ms/request)`);
    for (const [k, us] of [...m]
      .filter(([k]) => !k.startsWith("(idle)") && !k.startsWith("(root)"))
      .sort((a, b) => b[1] - a[1])
      .slice(0, TOP))
      console.log(`  ${ms(us)} ${pct(us)} ${(us / 1000 / requests).toFixed(2).padStart(6)}  ${k}`);
  };
  top(self, "self time");
  top(total, "total time");
  console.log(`\n  native functions by JS caller (top ${TOP})`);
  for (const [k, us] of [...nativeBy].sort((a, b) => b[1] - a[1]).slice(0, TOP))
    console.log(`  ${ms(us)} ${pct(us)} ${(us / 1000 / requests).toFixed(2).padStart(6)}  ${k}`);
  console.log("\n  self time by module");
  for (const [k, us] of [...modules]
    .filter(([k]) => k !== "(native)" || true)
    .sort((a, b) => b[1] - a[1])
    .slice(0, TOP))
    console.log(`  ${ms(us)} ${pct(us)} ${(us / 1000 / requests).toFixed(2).padStart(6)}  ${k}`);
  return { busy_ms_per_request: r1(busy / 1000 / requests) };
}

// ---------------------------------------------------------------- main

const { startGatewayBench, workerdCpuMs: cpuOfGroup, clockTicks } = await benchHelpers();
const workerdCpuMs = (group) => cpuOfGroup(group, clockTicks());
const apiToken = `bench-${crypto.randomUUID().replaceAll("-", "")}`;
// The same set-up as the turn bench: a copy of the project (or of --tree), the offline model on a port of its
// own (the copy's development config points at it), the D1 schema, wrangler dev on free ports.
const gateway = await startGatewayBench({
  tag: "profile",
  devVars: `GATEWAY_ADMIN_TOKEN=admin-${crypto.randomUUID().replaceAll("-", "")}\nGATEWAY_API_TOKENS=bench:${apiToken}\n`,
  source,
  // Not minified (wrangler.toml minifies): readable function names, exact source-map columns.
  extraArgs: ["--minify=false"],
  startModel: async (work, port) => {
    const { createLocalModelServer } = await import(pathToFileURL(join(work, "scripts", "local-model.mjs")).href);
    const server = createLocalModelServer();
    await new Promise((res, rej) => {
      server.once("error", rej);
      server.listen(port, "127.0.0.1", res);
    });
    return { server };
  },
});
tree = join(gateway.tmp, "tree");
const dev = gateway.dev.child;
const base = gateway.dev.base;
const inspectorPort = gateway.dev.inspectorPort;
const logFile = gateway.logFile;
let ok = false;

try {
  const auth = { authorization: `Bearer ${apiToken}`, "content-type": "application/json" };
  const healthz = async () => {
    const t = performance.now();
    const res = await fetch(`${base}/healthz`);
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`profile: /healthz ${res.status}`);
    return performance.now() - t;
  };
  const runTurn = async (message = "hello") => {
    const t = performance.now();
    const res = await fetch(`${base}/v1/runs`, {
      method: "POST",
      headers: { ...auth, prefer: "wait=30" },
      body: JSON.stringify({ agent_id: "main", message }),
    });
    const text = await res.text();
    if (res.status !== 200 || JSON.parse(text).status !== "completed") throw new Error(`profile: POST /v1/runs ${res.status}: ${text}`);
    return performance.now() - t;
  };
  const chatTurn = async (room) => {
    const t = performance.now();
    const res = await fetch(`${base}/v1/chat/messages`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ user_id: "u", room_id: room, agent_id: "main", message: "hello" }),
    });
    const text = await res.text();
    if (res.status !== 202) throw new Error(`profile: POST /v1/chat/messages ${res.status}: ${text}`);
    const { id } = JSON.parse(text);
    const ev = await fetch(`${base}/v1/runs/${id}/events`, { headers: { authorization: auth.authorization } });
    const stream = await ev.text();
    if (!stream.includes("event: run.completed")) throw new Error(`profile: run ${id} did not complete:\n${stream}`);
    return performance.now() - t;
  };

  // A long-lived conversation through the OpenAI front door (one request per turn), and one over the WebSocket route.
  const completionsTurn = async (conversation) => {
    const t = performance.now();
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ model: "agent:main", user: conversation, messages: [{ role: "user", content: "hello" }] }),
    });
    const text = await res.text();
    if (res.status !== 200 || JSON.parse(text).object !== "chat.completion")
      throw new Error(`profile: /v1/chat/completions ${res.status}: ${text}`);
    return performance.now() - t;
  };
  const socket = await openSocket(base, apiToken, "profile");
  const wsTurn = async () => {
    const t = performance.now();
    const run = await socket.turn();
    if (run.status !== "completed") throw new Error(`profile: socket turn ended ${JSON.stringify(run).slice(0, 300)}`);
    return performance.now() - t;
  };
  // A conversation's next turn through /v1/chat/completions (user = conversation) that makes one tool round:
  // the offline model calls fs.list_dir, then answers from its result (2 model calls, 1 tool call; the reply checked).
  const toolTurn = async (user) => {
    const t = performance.now();
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ model: "agent:main", user, messages: [{ role: "user", content: "list files" }] }),
    });
    const text = await res.text();
    if (res.status !== 200 || !JSON.parse(text).choices?.[0]?.message?.content?.startsWith("The tool fs.list_dir worked."))
      throw new Error(`profile: tool-round turn ${res.status}: ${text.slice(0, 300)}`);
    return performance.now() - t;
  };

  for (let i = 0; i < WARMUP; i++) {
    await healthz();
    await runTurn();
    await chatTurn("warm");
    await completionsTurn("profiled");
    await wsTurn();
    await toolTurn("profile-tool");
  }

  const list = await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json();
  console.log(`inspector targets: ${list.map((t) => `${t.title} ${t.webSocketDebuggerUrl}`).join(", ")}`);
  const bundle = findBundle();
  const mapper = bundle ? sourceMapper(bundle) : null;
  console.log(`bundle: ${bundle ? relative(tree, bundle) : "(not found)"}${mapper ? " (source map loaded)" : ""}`);
  const cdp = await cdpConnect(list[0].webSocketDebuggerUrl);
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: INTERVAL_US });

  mkdirSync(join(root, "bench", "results"), { recursive: true });
  const summary = {};
  const phases = [
    ["runs", TURNS, () => runTurn()],
    ["chat", CHAT, () => chatTurn("profiled")],
    ["completions", CHAT, () => completionsTurn("profiled")],
    ["ws", CHAT, () => wsTurn()],
    ["tool-round", TOOL, () => toolTurn("profile-tool")],
    ["healthz", HEALTHZ, () => healthz()],
  ];
  for (const [name, n, fn] of phases) {
    if (!n) continue;
    await cdp.send("Profiler.start");
    const times = [];
    for (let i = 0; i < n; i++) times.push(await fn());
    const { profile } = await cdp.send("Profiler.stop");
    const out = join(root, "bench", "results", `profile-${name}.cpuprofile`);
    writeFileSync(out, JSON.stringify(profile));
    summary[name] = { ...summarize(profile, mapper, n, `${name} (profiled median ${r1(median(times))} ms)`), file: relative(root, out) };
  }
  await cdp.send("Profiler.disable");
  cdp.close();
  socket.close();

  if (MEASURE) {
    const health = [];
    const plain = [];
    for (let i = 0; i < 40; i++) {
      health.push(await healthz());
      plain.push(await runTurn());
    }
    const cpu0 = workerdCpuMs(dev.pid);
    const total = 80;
    let issued = 0;
    const c0 = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (issued < total) {
          issued++;
          await runTurn();
        }
      }),
    );
    const tps = total / ((performance.now() - c0) / 1000);
    const cpu1 = workerdCpuMs(dev.pid);
    const chat = [];
    for (let i = 0; i < 20; i++) chat.push(await chatTurn("measure"));
    const tool = [];
    for (let i = 0; i < 20; i++) tool.push(await toolTurn("profile-tool"));
    summary.measured = {
      healthz_median_ms: r1(median(health)),
      plain_turn_median_ms: r1(median(plain)),
      chat_turn_median_ms: r1(median(chat)),
      tool_round_conversation_turn_median_ms: r1(median(tool)),
      turns_per_s_8_concurrent: r1(tps),
      workerd_cpu_ms_per_plain_turn: cpu0 === null ? null : r1((cpu1 - cpu0) / total),
    };
  }
  console.log(`\n${JSON.stringify(summary, null, 2)}`);
  const problems = readFileSync(logFile, "utf8")
    .split("\n")
    .filter((l) => /"level":"(warn|error)"|\[ERROR\]|✘/.test(l));
  for (const l of problems.slice(0, 5)) console.error(`profile: wrangler log: ${l.slice(0, 300)}`);
  ok = true;
} finally {
  await gateway.dispose(ok);
}
