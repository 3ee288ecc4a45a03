#!/usr/bin/env node
// `npm start`: the gateway on http://127.0.0.1:8787 with local Durable Objects,
// R2 and D1 (wrangler dev, state under .wrangler/state) — no Cloudflare account
// or API key needed — and beside it the offline model (scripts/local-model.mjs,
// docs/local-model.md) on 127.0.0.1:8790, which the development configuration
// config/gateway.dev.json5 makes the default model. Creates .dev.vars from
// .dev.vars.example on first run (adding a signing key of this machine's own
// when it has none) and applies the D1 migrations to the local database
// alongside the server.
//
// Environment: PORT (default 8787); SOPHIE_LOCAL_MODEL_PORT (default 8790; the
// dev config's baseUrl must match); SOPHIE_CONFIG (default
// config/gateway.dev.json5) names the config wrangler's build step bundles;
// SOPHIE_DEV_VARS names another secrets file to use instead of .dev.vars (the
// start test uses it so that it never writes into the working tree);
// SOPHIE_LOCAL_CRON=0 turns off the local cron clock.
//
// Cron Triggers do not fire by themselves under wrangler dev, so this script is
// the clock: at the start of every minute it calls /__scheduled (wrangler dev
// --test-scheduled), which runs the Worker's scheduled() handler as the `* * * * *`
// trigger would in production. curl that route to run a tick at once.
import { spawn } from "node:child_process";
import { appendFileSync, copyFileSync, existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { signingJwk } from "./signing-key.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const port = process.env.PORT ?? "8787";
const wrangler = join(root, "node_modules", ".bin", "wrangler");
// Nothing leaves the machine: no telemetry, no fetch of the Request.cf sample.
// SOPHIE_CONFIG reaches scripts/build.mjs through wrangler's [build] command.
const env = {
  ...process.env,
  SOPHIE_CONFIG: process.env.SOPHIE_CONFIG || "config/gateway.dev.json5",
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
};

let devVars = process.env.SOPHIE_DEV_VARS;
if (!devVars) {
  devVars = join(root, ".dev.vars");
  if (!existsSync(devVars)) {
    copyFileSync(join(root, ".dev.vars.example"), devVars);
    console.log("start: created .dev.vars from .dev.vars.example (development tokens; edit it to add provider keys)");
  }
  // Webhooks and the JWKS need the gateway's signing key (D-089). A private key has no place in the repository's
  // example file, so each machine gets its own, once, in its git-ignored .dev.vars.
  if (!/^GATEWAY_SIGNING_KEY=/m.test(readFileSync(devVars, "utf8"))) {
    const line = `GATEWAY_SIGNING_KEY='${JSON.stringify(signingJwk())}'`;
    appendFileSync(devVars, `\n# The gateway's Ed25519 signing key, made for this machine by npm start (development only).\n${line}\n`);
    console.log("start: added a development GATEWAY_SIGNING_KEY to .dev.vars (npm run -s signing-key makes one for a deployment)");
  }
}

let stopping = false;
// The offline model first, so it is listening by the time the gateway validates its default model.
// The gateway keeps running if it stops (say its port is taken): model calls then fail, and say so.
const model = spawn(process.execPath, [join(root, "scripts", "local-model.mjs")], { cwd: root, env, stdio: "inherit" });
model.on("exit", (code, signal) => {
  if (!stopping) console.error(`start: the offline model stopped (${signal ?? `exit code ${code}`}); the gateway keeps running without it`);
});

console.log(`start: Sophie Gateway on http://127.0.0.1:${port} with ${env.SOPHIE_CONFIG}  (try: curl http://127.0.0.1:${port}/healthz)`);
// SOPHIE_INSPECTOR_PORT moves wrangler's inspector off 9229, so two gateways can start at the same moment (tests).
const inspector = env.SOPHIE_INSPECTOR_PORT ? ["--inspector-port", env.SOPHIE_INSPECTOR_PORT] : [];
const dev = spawn(wrangler, ["dev", "--ip", "127.0.0.1", "--port", port, "--env-file", devVars, "--test-scheduled", ...inspector], {
  cwd: root,
  env,
  stdio: "inherit",
});

// The local cron clock: one tick at the start of every minute, like `crons = ["* * * * *"]` in production.
let clock;
/** Set once the local D1 schema is applied: a tick before it would only fail on missing tables. */
let migrated = false;
if (process.env.SOPHIE_LOCAL_CRON !== "0") {
  let warned = false;
  const tick = async () => {
    if (!migrated) return;
    try {
      const res = await fetch(`http://127.0.0.1:${port}/__scheduled?cron=*+*+*+*+*`);
      await res.arrayBuffer();
      warned = false;
    } catch {
      if (!warned) console.error("start: the local cron tick could not reach the gateway (still starting?); retrying every minute");
      warned = true;
    }
  };
  const untilNextMinute = 60_000 - (Date.now() % 60_000);
  clock = setTimeout(() => {
    tick();
    clock = setInterval(tick, 60_000);
  }, untilNextMinute);
}

/** Stops both children; `signal` is forwarded to wrangler, the model always gets SIGTERM. */
function stop(signal) {
  stopping = true;
  clearTimeout(clock);
  clearInterval(clock);
  if (model.exitCode === null && model.signalCode === null) model.kill("SIGTERM");
  if (signal && dev.exitCode === null && dev.signalCode === null) dev.kill(signal);
}
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => stop(signal));
dev.on("exit", (code, signal) => {
  stop();
  process.exit(code ?? (signal ? 1 : 0));
});

// The local D1 schema, applied while the server boots (the server does not need D1 to start).
const migrate = spawn(wrangler, ["d1", "migrations", "apply", "DB", "--local"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
let migrateOutput = "";
migrate.stdout.on("data", (d) => (migrateOutput += d));
migrate.stderr.on("data", (d) => (migrateOutput += d));
migrate.on("exit", (code) => {
  migrated = code === 0;
  if (code === 0) console.log("start: local D1 migrations applied");
  else console.error(`start: applying D1 migrations failed (the scheduler needs them):\n${migrateOutput}`);
});
