/**
 * The local gateway the browser tests drive: `scripts/start.mjs` (wrangler dev + the offline model,
 * docs/local-model.md) on free ports, and Debian's Chromium (scripts/chromium.sh) to look at it.
 *
 * How the gateway is started, and why:
 * - In a throw-away copy of the project (every file but node_modules, which is a symlink, .git, .wrangler
 *   and test-results). wrangler dev keeps its local D1, R2 and Durable Object state under `.wrangler/state`
 *   of the directory it runs in, and its build step rewrites `src/generated/`. In the copy, neither the
 *   generated module the workers tests see nor the state of a developer's `npm start` (which would pick up
 *   the config version posted below) nor another wrangler dev running from the work tree at the same time
 *   (test/build/start.test.ts) is touched, and every run starts from empty state.
 * - With the shipped config (config/gateway.json5, as production bundles it). The scenarios need the
 *   development agents (the offline model `local:sophie-local`, agent `main` allowed `fs.write_text`,
 *   `approvalRequired: ["side_effect"]`), so before them the development configuration
 *   (config/gateway.dev.json5, parsed with json5) goes in through `POST /api/admin/config` with the admin
 *   token of the copied .dev.vars.example — the same way an operator changes the config in force — with the
 *   offline model's `baseUrl` moved to the free port it listens on.
 * - The secrets are .dev.vars.example, copied to a temp file (SOPHIE_DEV_VARS); the local cron clock is off;
 *   wrangler's inspector gets a free port (SOPHIE_INSPECTOR_PORT, read by scripts/start.mjs).
 * `stop()` ends the whole process group (start.mjs, wrangler, workerd, the offline model) and removes the copy.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, relative, sep } from "node:path";
import JSON5 from "json5";

export const root = join(import.meta.dirname, "..", "..");

/** How long the gateway may take to answer /healthz with its migrations applied (wrangler's first build included). */
const START_TIMEOUT_MS = 120_000;
/** src/storage/admin-generation.ts: how long an isolate may keep using the config it last read. */
const ADMIN_REFRESH_MS = 5_000;

/**
 * The path of a working Chromium, from scripts/chromium.sh (which installs Debian's chromium when missing).
 * Throws a one-line reason when there is none, so the browser tests fail rather than skip.
 */
export function chromiumPath(): string {
  const result = spawnSync("sh", [join(root, "scripts", "chromium.sh")], { cwd: root, encoding: "utf8", timeout: 600_000 });
  const path = result.stdout.trim();
  if (result.status === 0 && path) return path;
  const reason = result.stderr
    .trim()
    .split("\n")
    .findLast((line) => line.startsWith("scripts/chromium.sh:"));
  throw new Error(
    reason ?? `scripts/chromium.sh exited with ${result.status ?? result.signal}: ${result.stderr.trim().split("\n").at(-1)}`,
  );
}

/** The launch options for Chromium in this closed network (docs: .library machine notes; test/README.md "The browser tests"). */
export function chromiumLaunchOptions(executablePath: string) {
  return {
    executablePath,
    headless: true,
    // Playwright gives every launch a fresh, empty user data dir of its own (it refuses --user-data-dir in args).
    // Without the background-networking flags Chromium keeps dialing Google's hosts, which this network refuses.
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** `NAME=value` lines of a dotenv file. */
export function readDevVars(file: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const m = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (m?.[1] && m[2] !== undefined) vars[m[1]] = m[2];
  }
  return vars;
}

/** The price the browser tests give the offline model (USD per million tokens). */
export const BROWSER_PRICING = { inputPerMillion: 2.5, outputPerMillion: 10 };

/** The development configuration with the offline model's baseUrl on `modelPort` (and its price). */
export function developmentConfig(modelPort: number): Record<string, any> {
  const config = JSON5.parse(readFileSync(join(root, "config", "gateway.dev.json5"), "utf8"));
  config.models.providers.local.baseUrl = `http://127.0.0.1:${modelPort}/v1`;
  // Issue 25 §3 (D-082): the offline model priced, so the runs list and the usage view show costs; the markers model
  // stays unpriced, so they also show a cost that is not known.
  config.models.providers.local.models["sophie-local"].pricing = BROWSER_PRICING;
  return config;
}

export interface Gateway {
  /** http://127.0.0.1:<port> */
  url: string;
  adminToken: string;
  /** An API-scope token (GATEWAY_API_TOKENS of .dev.vars.example) and its caller id. */
  apiToken: string;
  apiCaller: string;
  modelPort: number;
  /** The development configuration as posted (baseUrl moved to the offline model's port). */
  config: Record<string, any>;
  /** fetch with the admin token. */
  admin(path: string, init?: RequestInit): Promise<Response>;
  /** fetch with the API token. */
  api(path: string, init?: RequestInit): Promise<Response>;
  /** What start.mjs, wrangler and the offline model printed so far. */
  output(): string;
  stop(): Promise<void>;
}

/** A copy of the project to run wrangler dev in (see the module comment). */
function copyProject(): string {
  const dir = mkdtempSync(join(tmpdir(), "sophie-browser-"));
  const skip = new Set(["node_modules", ".git", ".wrangler", "test-results", join("bench", "results")]);
  cpSync(root, dir, {
    recursive: true,
    filter: (src) => {
      const rel = relative(root, src);
      if (rel === "") return true;
      if (skip.has(rel)) return false;
      const name = rel.split(sep).at(-1) ?? "";
      return !(name.startsWith(".dev.vars") && name !== ".dev.vars.example");
    },
  });
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"), "dir");
  return dir;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Starts the gateway; once more on fresh ports if a port it was given was taken meanwhile by another process. */
export async function startGateway(): Promise<Gateway> {
  try {
    return await startOnce();
  } catch (err) {
    if (!/Address already in use|EADDRINUSE/.test((err as Error).message)) throw err;
    return startOnce();
  }
}

async function startOnce(): Promise<Gateway> {
  const dir = copyProject();
  const port = await freePort();
  const modelPort = await freePort();
  const inspectorPort = await freePort();
  const devVarsDir = mkdtempSync(join(tmpdir(), "sophie-browser-vars-"));
  const devVars = join(devVarsDir, "dev.vars");
  copyFileSync(join(root, ".dev.vars.example"), devVars);
  const vars = readDevVars(devVars);
  const adminToken = vars.GATEWAY_ADMIN_TOKEN;
  const [apiCaller, apiToken] = (vars.GATEWAY_API_TOKENS ?? "").split(",")[0]?.split(":") ?? [];
  if (!adminToken || !apiCaller || !apiToken) throw new Error(".dev.vars.example has no GATEWAY_ADMIN_TOKEN or GATEWAY_API_TOKENS");

  const { MOONSHOT_API_KEY: _key, SOPHIE_CONFIG: _config, ...env } = process.env;
  let output = "";
  const child: ChildProcess = spawn(process.execPath, [join(dir, "scripts", "start.mjs")], {
    cwd: dir,
    env: {
      ...env,
      PORT: String(port),
      SOPHIE_DEV_VARS: devVars,
      SOPHIE_CONFIG: "config/gateway.json5",
      SOPHIE_LOCAL_MODEL_PORT: String(modelPort),
      SOPHIE_LOCAL_CRON: "0",
      // Not wrangler's default 9229: two wrangler devs starting at the same moment would both take it.
      SOPHIE_INSPECTOR_PORT: String(inspectorPort),
      FORCE_COLOR: "0",
      NO_COLOR: "1",
    },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  child.stdout?.on("data", (d) => (output += d));
  child.stderr?.on("data", (d) => (output += d));
  let exited: string | null = null;
  const done = new Promise<void>((resolve) =>
    child.on("exit", (code, signal) => {
      exited = signal ?? `exit code ${code}`;
      resolve();
    }),
  );

  const url = `http://127.0.0.1:${port}`;
  const withToken =
    (token: string) =>
    (path: string, init: RequestInit = {}) => {
      const headers = new Headers(init.headers);
      headers.set("authorization", `Bearer ${token}`);
      if (init.body !== undefined && !headers.has("content-type")) headers.set("content-type", "application/json");
      return fetch(`${url}${path}`, { ...init, headers });
    };

  const stop = async () => {
    if (child.pid && exited === null) {
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        /* already gone */
      }
      const killed = await Promise.race([done.then(() => true), sleep(10_000).then(() => false)]);
      if (!killed) {
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {
          /* already gone */
        }
        await Promise.race([done, sleep(5_000)]);
      }
    }
    // workerd may outlive start.mjs for a moment; its group was signalled above.
    rmSync(dir, { recursive: true, force: true });
    rmSync(devVarsDir, { recursive: true, force: true });
  };

  const gateway: Gateway = {
    url,
    adminToken,
    apiToken,
    apiCaller,
    modelPort,
    config: developmentConfig(modelPort),
    admin: withToken(adminToken),
    api: withToken(apiToken),
    output: () => output,
    stop,
  };

  try {
    // Up: /healthz answers, and the local D1 migrations (run index, approvals, config versions) are in.
    const started = Date.now();
    let healthy = false;
    while (Date.now() - started < START_TIMEOUT_MS) {
      if (exited !== null) throw new Error(`scripts/start.mjs stopped (${exited}) before the gateway answered`);
      if (/applying D1 migrations failed/.test(output)) throw new Error("scripts/start.mjs could not apply the local D1 migrations");
      if (!healthy) {
        try {
          const res = await fetch(`${url}/healthz`);
          healthy = res.ok && ((await res.json()) as { ok?: boolean }).ok === true;
        } catch {
          /* not listening yet */
        }
      }
      if (healthy && output.includes("start: local D1 migrations applied")) break;
      await sleep(250);
    }
    if (!healthy || !output.includes("start: local D1 migrations applied"))
      throw new Error(`the gateway did not come up within ${START_TIMEOUT_MS / 1000} s`);

    // The development configuration, as the config in force (a new config version).
    const posted = await gateway.admin("/api/admin/config", { method: "POST", body: JSON.stringify(gateway.config) });
    const postedBody = await posted.text();
    if (posted.status !== 201) throw new Error(`POST /api/admin/config answered ${posted.status}: ${postedBody.slice(0, 500)}`);
    const inForce = (await (await gateway.admin("/api/admin/config")).json()) as { models?: { default?: string } };
    if (inForce.models?.default !== "local:sophie-local")
      throw new Error(
        `after POST /api/admin/config the default model is ${JSON.stringify(inForce.models?.default)}, not local:sophie-local`,
      );
    // The isolate that took the POST uses it at once; the others (the SessionDOs) within ADMIN_REFRESH_MS (5 s,
    // src/storage/admin-generation.ts).
    await sleep(ADMIN_REFRESH_MS + 1_000);
  } catch (err) {
    const tail = output.split("\n").slice(-40).join("\n");
    await stop();
    throw new Error(`${(err as Error).message}\n--- gateway output (last 40 lines) ---\n${tail}`);
  }
  return gateway;
}

/** Where the screenshots go (test-results/ is git-ignored), emptied first so none is left from an earlier run. */
export const SCREENSHOTS = join(root, "test-results", "screenshots");
rmSync(SCREENSHOTS, { recursive: true, force: true });
mkdirSync(SCREENSHOTS, { recursive: true });
