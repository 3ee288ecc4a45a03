/**
 * `npm run audit:verify`: the command-line side of the audit chain check. It calls the gateway's
 * verify route with the admin token and turns the answer into a line and an exit code.
 */
import { spawn } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
let server: Server;
let base = "";
const seen: { url: string; auth: string | undefined }[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ url: req.url ?? "", auth: req.headers.authorization });
    const broken = req.url?.includes("agent_id=broken");
    res.setHeader("content-type", "application/json");
    res.end(
      JSON.stringify(
        broken
          ? {
              ok: false,
              first_problem: { stream: "s1", key: "agents/broken/audit/2026-11-26/x.jsonl", problem: "prev_sha256 does not match" },
            }
          : { ok: true, segments: 3, events: 42, streams: 2 },
      ),
    );
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

/** Runs the script (asynchronously: the fake gateway answers from this same process). */
function run(...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(root, "scripts", "audit-verify.mjs"), ...args], {
      env: { ...process.env, GATEWAY_URL: base, GATEWAY_ADMIN_TOKEN: "admin-token-for-verify-test" },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

describe("npm run audit:verify", () => {
  it("an intact day → exit 0 and one summary line; the admin token is sent as a bearer token", async () => {
    const r = await run("main", "2026-11-26");
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toBe("audit main 2026-11-26: ok — 3 segment(s), 42 event(s), 2 stream(s)");
    expect(seen.at(-1)).toEqual({
      url: "/api/admin/audit/verify?agent_id=main&date=2026-11-26",
      auth: "Bearer admin-token-for-verify-test",
    });
  });

  it("a broken chain → exit 1 and the first problem with its segment", async () => {
    const r = await run("broken", "2026-11-26");
    expect(r.status).toBe(1);
    expect(r.stdout.trim()).toBe(
      "audit broken 2026-11-26: BROKEN — prev_sha256 does not match at agents/broken/audit/2026-11-26/x.jsonl (stream s1)",
    );
  });

  it("bad arguments → exit 2 with the usage line", async () => {
    const r = await run("main", "26-11-2026");
    expect(r.status).toBe(2);
    expect(r.stderr.trim()).toBe("usage: npm run audit:verify -- <agent_id> <YYYY-MM-DD>");
  });
});
