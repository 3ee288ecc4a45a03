#!/usr/bin/env node
// `npm run tools:lock`: writes config/tool-schemas.lock.json — the SHA-256 of every built-in tool's JSON
// Schema. Review the tool policy, then run this: until the lock is updated, a tool whose schema changed
// needs a human approval for every call (the schema-drift guard, docs/tools.md). `--check` only compares
// and exits 1 on a difference.
import { writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { loadToolLock } from "./build.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = await esbuild.build({
  stdin: {
    contents:
      'export { tools } from "./src/tools/registry"; import "./src/tools/builtin"; export { schemaHash } from "./src/tools/schema-lock";',
    resolveDir: root,
    loader: "ts",
  },
  bundle: true,
  format: "esm",
  platform: "neutral",
  write: false,
  logLevel: "silent",
});
const { tools, schemaHash } = await import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
const lock = {};
for (const def of tools.list()) lock[def.name] = await schemaHash(def);
const text = `${JSON.stringify(lock, null, 2)}\n`;
const file = join(root, "config", "tool-schemas.lock.json");
if (process.argv.includes("--check")) {
  const current = await loadToolLock(file);
  if (JSON.stringify(current) !== JSON.stringify(lock)) {
    console.error("config/tool-schemas.lock.json is out of date: review the tool policy, then run npm run tools:lock");
    process.exit(1);
  }
  console.log("tool schema lock: up to date");
} else {
  await writeFile(file, text);
  console.log(`wrote config/tool-schemas.lock.json (${Object.keys(lock).length} tools)`);
}
