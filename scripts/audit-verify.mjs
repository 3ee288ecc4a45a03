#!/usr/bin/env node
// `npm run audit:verify -- <agent_id> <YYYY-MM-DD>`: asks a running gateway to walk that agent's audit hash
// chains for that day (GET /api/admin/audit/verify) and prints the result; exits 1 on a broken or missing link.
//
// Environment: GATEWAY_URL (default http://127.0.0.1:8787, the `npm start` gateway) and GATEWAY_ADMIN_TOKEN
// (default: read from .dev.vars). The verification runs inside the Worker, next to the R2 bucket and the
// Durable Objects whose chain heads it compares against.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const [agentId, day] = process.argv.slice(2);
if (!agentId || !/^\d{4}-\d{2}-\d{2}$/.test(day ?? "")) {
  console.error("usage: npm run audit:verify -- <agent_id> <YYYY-MM-DD>");
  process.exit(2);
}
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
let token = process.env.GATEWAY_ADMIN_TOKEN;
if (!token) {
  try {
    token = /^GATEWAY_ADMIN_TOKEN=(.+)$/m.exec(readFileSync(join(root, ".dev.vars"), "utf8"))?.[1]?.trim();
  } catch {
    /* no .dev.vars */
  }
}
if (!token) {
  console.error("audit:verify: set GATEWAY_ADMIN_TOKEN (or run from a checkout with .dev.vars)");
  process.exit(2);
}
const base = process.env.GATEWAY_URL ?? "http://127.0.0.1:8787";
const url = `${base}/api/admin/audit/verify?agent_id=${encodeURIComponent(agentId)}&date=${day}`;
let res;
try {
  res = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
} catch (err) {
  console.error(`audit:verify: cannot reach ${base} (${err.cause?.code ?? err.message}); is the gateway running?`);
  process.exit(2);
}
const body = await res.json();
if (!res.ok) {
  console.error(`audit:verify: HTTP ${res.status}: ${body?.error?.message ?? JSON.stringify(body)}`);
  process.exit(2);
}
if (body.ok) {
  console.log(`audit ${agentId} ${day}: ok — ${body.segments} segment(s), ${body.events} event(s), ${body.streams} stream(s)`);
} else {
  const p = body.first_problem;
  console.log(`audit ${agentId} ${day}: BROKEN — ${p.problem}${p.key ? ` at ${p.key}` : ""} (stream ${p.stream})`);
  process.exit(1);
}
