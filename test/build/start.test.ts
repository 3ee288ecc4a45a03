/**
 * `npm start` (scripts/start.mjs) brings the gateway up locally with no
 * account and no API key, and answers /healthz within 30 s (issue 2 "Done when").
 * Runs in Node: it starts `wrangler dev` as a child process on a free port.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { copyFileSync, mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");

function freePort(): Promise<number> {
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

let child: ChildProcess | undefined;
afterAll(() => {
  // wrangler dev runs in the child's process group; end all of it.
  if (child?.pid) {
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {
      /* already gone */
    }
  }
});

describe("npm start", () => {
  it("answers GET /healthz with {ok:true} within 30 s of starting, without any API key", async () => {
    const port = await freePort();
    const { MOONSHOT_API_KEY: _drop, ...env } = process.env;
    // The example secrets, from a temp file: the test never writes .dev.vars into the working tree.
    const devVars = join(mkdtempSync(join(tmpdir(), "sophie-start-")), "dev.vars");
    copyFileSync(join(root, ".dev.vars.example"), devVars);
    const started = Date.now();
    child = spawn(process.execPath, [join(root, "scripts", "start.mjs")], {
      cwd: root,
      env: { ...env, PORT: String(port), SOPHIE_DEV_VARS: devVars },
      stdio: "ignore",
      detached: true,
    });
    let body: unknown;
    while (Date.now() - started < 30_000) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/healthz`);
        body = await res.json();
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    expect(body).toEqual({ ok: true });
    expect(Date.now() - started).toBeLessThan(30_000);

    // The error envelope and request id hold on the real local server too.
    const missing = await fetch(`http://127.0.0.1:${port}/no-such-route`);
    expect(missing.status).toBe(404);
    expect(missing.headers.get("x-request-id")).toMatch(/^req_/);
    expect(await missing.json()).toEqual({ error: { code: "resource.not_found", message: "no route for GET /no-such-route" } });
  }, 60_000);
});
