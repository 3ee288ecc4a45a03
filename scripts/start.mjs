#!/usr/bin/env node
// `npm start`: the gateway on http://127.0.0.1:8787 with local Durable Objects,
// R2 and D1 (wrangler dev, state under .wrangler/state) — no Cloudflare account
// or API key needed. Creates .dev.vars from .dev.vars.example on first run and
// applies the D1 migrations to the local database.
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const port = process.env.PORT ?? "8787";
const wrangler = join(root, "node_modules", ".bin", "wrangler");
// Nothing leaves the machine: no telemetry, no fetch of the Request.cf sample.
const env = { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };

if (!existsSync(join(root, ".dev.vars"))) {
  copyFileSync(join(root, ".dev.vars.example"), join(root, ".dev.vars"));
  console.log("start: created .dev.vars from .dev.vars.example (development tokens; edit it to add provider keys)");
}

const migrate = spawnSync(wrangler, ["d1", "migrations", "apply", "DB", "--local"], {
  cwd: root,
  env,
  stdio: ["ignore", "pipe", "pipe"],
  encoding: "utf8",
});
if (migrate.status !== 0) {
  console.error(`start: applying D1 migrations failed:\n${migrate.stdout}${migrate.stderr}`);
  process.exit(1);
}

console.log(`start: Sophie Gateway on http://127.0.0.1:${port}  (try: curl http://127.0.0.1:${port}/healthz)`);
const dev = spawn(wrangler, ["dev", "--ip", "127.0.0.1", "--port", port], { cwd: root, env, stdio: "inherit" });
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => dev.kill(signal));
dev.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
