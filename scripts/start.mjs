#!/usr/bin/env node
// `npm start`: the gateway on http://127.0.0.1:8787 with local Durable Objects,
// R2 and D1 (wrangler dev, state under .wrangler/state) — no Cloudflare account
// or API key needed. Creates .dev.vars from .dev.vars.example on first run and
// applies the D1 migrations to the local database alongside the server.
//
// Environment: PORT (default 8787); SOPHIE_DEV_VARS names another secrets file
// to use instead of .dev.vars (the start test uses it so that it never writes
// into the working tree).
import { spawn } from "node:child_process";
import { copyFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const port = process.env.PORT ?? "8787";
const wrangler = join(root, "node_modules", ".bin", "wrangler");
// Nothing leaves the machine: no telemetry, no fetch of the Request.cf sample.
const env = { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };

let devVars = process.env.SOPHIE_DEV_VARS;
if (!devVars) {
  devVars = join(root, ".dev.vars");
  if (!existsSync(devVars)) {
    copyFileSync(join(root, ".dev.vars.example"), devVars);
    console.log("start: created .dev.vars from .dev.vars.example (development tokens; edit it to add provider keys)");
  }
}

console.log(`start: Sophie Gateway on http://127.0.0.1:${port}  (try: curl http://127.0.0.1:${port}/healthz)`);
const dev = spawn(wrangler, ["dev", "--ip", "127.0.0.1", "--port", port, "--env-file", devVars], { cwd: root, env, stdio: "inherit" });
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => dev.kill(signal));
dev.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

// The local D1 schema, applied while the server boots (the server does not need D1 to start).
const migrate = spawn(wrangler, ["d1", "migrations", "apply", "DB", "--local"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
let migrateOutput = "";
migrate.stdout.on("data", (d) => (migrateOutput += d));
migrate.stderr.on("data", (d) => (migrateOutput += d));
migrate.on("exit", (code) => {
  if (code === 0) console.log("start: local D1 migrations applied");
  else console.error(`start: applying D1 migrations failed (the scheduler needs them):\n${migrateOutput}`);
});
