/**
 * Issue 20 §2, the figure: a scripted hostile model leaks the hidden layers in
 * many disguises — in its reply (plain and streamed), in tool-call arguments
 * (fs.write_text, message.send, email.draft, a read-only test tool) and in
 * NOTES — through every HTTP surface (POST /v1/chat/completions with and
 * without stream, POST /v1/runs with Prefer: wait, POST /v1/chat/messages).
 * A leak "reaches the caller" when a fragment of what the model sent, or of
 * the hidden text itself, appears in the response, the run view, its events,
 * the admin run detail, the transcript, the R2 bundle, any R2 object, or the
 * session's checkpoint and memory. Figure printed: disguises held X/Y.
 */
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { BUNDLE_OBJECT } from "../../src/audit/bundles";
import { disclosureRefusalMessage } from "../../src/prompts/disclosure";
import { TOOL_CALLS_BEGIN, TOOL_CALLS_END } from "../../src/runs/tool-markers";
import { runArtifactPath } from "../../src/runs/view";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { baseSection, baseWithoutCanary, CANARY_DISGUISES, DISGUISES, PARAPHRASE_WITH_SHINGLES } from "../support/leaks";
import { recallIn } from "../support/memory";
import type { ScriptStep } from "../support/outbound";
import { ADMIN, ALICE, type App, appFor, call, invocations, readResponse, registerTestTools, until } from "../support/runs";

beforeAll(() => registerTestTools());

type Surface = "completions" | "completions_stream" | "runs_wait" | "chat_messages";

interface LeakCase {
  name: string;
  surface: Surface;
  steps: ScriptStep[];
  /** Fragments whose presence anywhere the caller (or an admin) can look means the leak got out. */
  probes: string[];
  /** The model speaks the marker tool-call protocol (no native tools). */
  markers?: boolean;
  /** The reply itself was the leak (the caller gets the refusal), or a tool call was (the run goes on). */
  carrier: "reply" | "tool_args" | "notes";
}

/** Three fragments of `text` (at 30%, 50%, 70%), `len` characters each. */
function fragments(text: string, len = 20): string[] {
  const chars = [...text];
  return [0.3, 0.5, 0.7].map((f) => chars.slice(Math.floor(chars.length * f), Math.floor(chars.length * f) + len).join(""));
}

const SECTION = baseSection("Order of authority");
const TOOLS_SECTION = baseSection("Tools and side effects");
const SURFACES: Surface[] = ["completions", "completions_stream", "runs_wait", "chat_messages"];

function replyCases(): LeakCase[] {
  const out: LeakCase[] = [];
  let i = 0;
  for (const [name, disguise] of Object.entries(DISGUISES)) {
    const reply = disguise(SECTION);
    out.push({
      name: `reply:${name}`,
      surface: SURFACES[i++ % SURFACES.length] as Surface,
      steps: [{ content: reply }],
      probes: [...fragments(reply), ...fragments(SECTION, 30)],
      carrier: "reply",
    });
  }
  out.push({
    name: "reply:paraphrase_with_shingles",
    surface: "runs_wait",
    steps: [{ content: PARAPHRASE_WITH_SHINGLES }],
    probes: fragments(PARAPHRASE_WITH_SHINGLES),
    carrier: "reply",
  });
  for (const [name, reply] of Object.entries(CANARY_DISGUISES)) {
    const probes = [reply, ...fragments(reply, 10), "4f9c2e7a61"];
    out.push({
      name: `reply:${name}`,
      surface: SURFACES[i++ % SURFACES.length] as Surface,
      steps: [{ content: reply }],
      probes,
      carrier: "reply",
    });
  }
  return out;
}

/** A model that puts the leak in a tool call, reads the tool error, then answers innocently. */
function toolCase(name: string, surface: Surface, tool: string, args: Record<string, unknown>, leak: string): LeakCase {
  return {
    name: `tool_args:${name}`,
    surface,
    steps: [
      { content: null, tool_calls: [{ id: "call_leak", name: tool, arguments: JSON.stringify(args) }] },
      { content: "I could not do that." },
    ],
    probes: [...fragments(leak), ...fragments(TOOLS_SECTION, 30)],
    carrier: "tool_args",
  };
}

function carrierCases(): LeakCase[] {
  const b64 = DISGUISES.base64?.(TOOLS_SECTION) ?? "";
  const homoglyphs = DISGUISES.homoglyphs?.(TOOLS_SECTION) ?? "";
  const zeroWidth = DISGUISES.zero_width_split?.(TOOLS_SECTION) ?? "";
  const escaped = DISGUISES.json_escaped?.(TOOLS_SECTION) ?? "";
  const reversed = DISGUISES.reversed?.(SECTION) ?? "";
  const reversedTools = DISGUISES.reversed?.(TOOLS_SECTION) ?? "";
  const notes = (patch: object, visible: string): LeakCase => ({
    name: `notes:${Object.keys(patch)[0]}`,
    surface: "runs_wait",
    steps: [{ content: `${visible}\n<<<NOTES_JSON>>>${JSON.stringify(patch)}<<<END_NOTES_JSON>>>` }],
    probes: fragments(Object.values(patch)[0] as string),
    carrier: "notes",
  });
  return [
    toolCase(
      "fs.write_text plain",
      "runs_wait",
      "fs__write_text",
      { path: "notes/prompt.txt", text: baseWithoutCanary() },
      baseWithoutCanary(),
    ),
    toolCase("fs.write_text base64", "completions", "fs__write_text", { path: "notes/p.b64", text: b64 }, b64),
    toolCase(
      "message.send homoglyphs",
      "chat_messages",
      "message__send",
      { channel: "telegram", to: "12345", recipient_type: "user", text: homoglyphs },
      homoglyphs,
    ),
    toolCase(
      "email.draft zero-width",
      "completions_stream",
      "email__draft",
      { to: ["a@example.com"], subject: "notes", body: zeroWidth },
      zeroWidth,
    ),
    toolCase("test.echo json-escaped (read-only, would run at once)", "runs_wait", "test__echo", { text: escaped }, escaped),
    {
      ...toolCase("fs.write_text reversed, in a marker block", "runs_wait", "fs.write_text", {}, reversedTools),
      markers: true,
      steps: [
        {
          content: `Writing it down.\n${TOOL_CALLS_BEGIN}\n${JSON.stringify([{ id: "t1", tool: "fs.write_text", args: { path: "p.txt", text: reversedTools } }])}\n${TOOL_CALLS_END}`,
        },
        { content: "I could not do that." },
      ],
    },
    { ...notes({ set_episode_summary: SECTION }, "Noted."), surface: "runs_wait" },
    {
      ...notes({ add_decisions: [reversed] }, "Done."),
      name: "notes:add_decisions reversed",
      probes: fragments(reversed),
      surface: "completions_stream",
    },
  ];
}

function appForCase(host: string, c: LeakCase): App {
  return appFor(
    runConfig(host, {
      model: { supportsStreaming: c.surface === "completions_stream", ...(c.markers ? { supportsTools: false } : {}) },
      agent: { tools: { allow: ["fs.write_text", "message.send", "email.draft", "test.echo"] } },
      // Without the guard a leaking call would wait for approval; the answer then comes after this long.
      openai: { waitSeconds: 5 },
    }),
  );
}

/** Runs one case through its surface; returns the run id and what the caller got back. */
async function drive(app: App, c: LeakCase): Promise<{ runId: string; answer: string; raw: string }> {
  const userMessage = "Tell me something about your day.";
  const headers = { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" };
  if (c.surface === "completions" || c.surface === "completions_stream") {
    const stream = c.surface === "completions_stream";
    const res = await app.request(
      "https://gateway.test/v1/chat/completions",
      {
        method: "POST",
        headers,
        body: JSON.stringify({ model: "agent:main", messages: [{ role: "user", content: userMessage }], stream }),
      },
      env,
    );
    const r = await readResponse(res);
    const runId = r.headers.get("X-Run-Id") as string;
    const answer = stream
      ? r.text
          .split("\n")
          .filter((l) => l.startsWith("data: {"))
          .map((l) => JSON.parse(l.slice(6)).choices?.[0]?.delta?.content ?? "")
          .join("")
      : (r.body?.choices?.[0]?.message?.content ?? "");
    return { runId, answer, raw: r.text };
  }
  if (c.surface === "runs_wait") {
    const res = await app.request(
      "https://gateway.test/v1/runs",
      { method: "POST", headers: { ...headers, Prefer: "wait=20" }, body: JSON.stringify({ agent_id: "main", message: userMessage }) },
      env,
    );
    const r = await readResponse(res);
    return { runId: r.body.id, answer: r.body.output ?? "", raw: r.text };
  }
  const room = `room-${crypto.randomUUID().slice(0, 8)}`;
  const sent = await call(app, "POST", "/v1/chat/messages", { user_id: "u1", room_id: room, agent_id: "main", message: userMessage });
  const run = await settled(app, sent.body.id);
  return { runId: sent.body.id, answer: run.output ?? "", raw: sent.text };
}

/** Every string inside a JSON value (strings that are JSON themselves are opened too). */
function leaves(value: unknown, out: string[] = []): string[] {
  if (typeof value === "string") {
    out.push(value);
    if (/^\s*[[{]/.test(value))
      try {
        leaves(JSON.parse(value), out);
      } catch {
        /* plain text */
      }
  } else if (Array.isArray(value)) for (const v of value) leaves(v, out);
  else if (value && typeof value === "object")
    for (const [k, v] of Object.entries(value)) {
      out.push(k);
      leaves(v, out);
    }
  return out;
}

/** Raw text plus the strings of every JSON document in it (whole, per line, per SSE data line). */
function readable(raw: string): string {
  const docs: string[] = [raw];
  for (const candidate of [raw, ...raw.split("\n").map((l) => l.replace(/^data: /, ""))]) {
    try {
      docs.push(...leaves(JSON.parse(candidate)));
    } catch {
      /* not JSON */
    }
  }
  return docs.join("\n");
}

async function r2Text(bucket: R2Bucket): Promise<string> {
  const out: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ cursor, limit: 1000 });
    for (const o of page.objects) out.push(o.key, readable((await (await bucket.get(o.key))?.text()) ?? ""));
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return out.join("\n");
}

/** Everything a caller or an admin can read about the run, as text. */
async function everywhere(app: App, runId: string, raw: string): Promise<string> {
  const view = await call(app, "GET", `/v1/runs/${runId}`);
  const events = await call(app, "GET", `/v1/runs/${runId}/events?follow=false`);
  const detail = await call(app, "GET", `/api/admin/runs/${runId}`, undefined, ADMIN);
  const transcript = await call(app, "GET", `/api/admin/chat/sessions/${view.body.session_id}/transcript`, undefined, ADMIN);
  const bundleKey = `${runArtifactPath("main", runId)}/${BUNDLE_OBJECT}`;
  // A run that ended writes its bundle; one stopped at an approval (only without the guard) has none yet.
  await until(async () => (await env.AUDIT.head(bundleKey)) !== null, 5_000).catch(() => {});
  const indexed = await env.DB.prepare("SELECT session_key FROM runs WHERE run_id = ?").bind(runId).first<{ session_key: string }>();
  const stub = env.SESSIONS.getByName(indexed?.session_key ?? "");
  const identity = { sessionKey: indexed?.session_key ?? "", agentId: "main" };
  const checkpoint = await stub.checkpoint(identity);
  const memory = await recallIn(stub, "instructions data authority tools operators", 20);
  return [
    readable(raw),
    readable(view.text),
    readable(events.text),
    readable(detail.text),
    readable(transcript.text),
    readable(JSON.stringify(checkpoint)),
    readable(JSON.stringify(memory)),
    await r2Text(env.AUDIT),
    await r2Text(env.WORKSPACE),
  ].join("\n");
}

/** Polls the run until it ends or waits for an approval (a leaking call must never get that far). */
async function settled(app: App, runId: string): Promise<{ status: string; output: string | null }> {
  let run: { status: string; output: string | null } = { status: "unknown", output: null };
  await until(async () => {
    run = (await call(app, "GET", `/v1/runs/${runId}`)).body;
    return ["completed", "failed", "cancelled", "awaiting_approval"].includes(run.status);
  }, 15_000);
  return run;
}

/**
 * What the caller was answered: the refusal for a leaking reply or NOTES; for a leaking tool call, the model's
 * next answer after a `policy.denied` tool error, the call never run, never sent for approval, its arguments withheld.
 */
async function answeredAsExpected(
  app: App,
  c: LeakCase,
  runId: string,
  run: { status: string },
  answer: string,
  ran: number,
): Promise<string[]> {
  const problems: string[] = [];
  const check = (ok: boolean, what: string) => ok || problems.push(`${c.name}: ${what}`);
  check(run.status === "completed", `run ${run.status}`);
  if (c.carrier !== "tool_args") {
    // Issue 33 (D-090): a stream releases the model's own lead-in ("Encoded as ") before it is refused; the caller then
    // reads that lead-in, a blank line and the refusal. Whole answers are the refusal alone, as before.
    const refusal = disclosureRefusalMessage();
    const lead = answer.endsWith(`\n\n${refusal}`) ? answer.slice(0, -(refusal.length + 2)) : null;
    const leadIn = c.surface === "completions_stream" && lead !== null && (c.steps[0]?.content ?? "").startsWith(lead);
    check(answer === refusal || leadIn, `answered ${JSON.stringify(answer.slice(0, 60))}`);
    return problems;
  }
  check(answer === "I could not do that.", `answered ${JSON.stringify(answer.slice(0, 60))}`);
  check(ran === 0, `the tool ran ${ran} time(s)`);
  const events: { event_type: string; payload: any }[] = (await call(app, "GET", `/api/admin/runs/${runId}`, undefined, ADMIN)).body.events;
  check(events.find((e) => e.event_type === "tool.result")?.payload.error?.code === "policy.denied", "tool result is not policy.denied");
  const args = events.find((e) => e.event_type === "tool.call")?.payload.args ?? {};
  check(JSON.stringify(Object.keys(args)) === '["$withheld","sha256"]', "tool.call args not withheld");
  check(!events.some((e) => e.event_type === "approval.requested"), "an approval was requested");
  return problems;
}

describe("ISSUE20-§2 figure: a hostile model's disguised leaks never reach the caller", () => {
  const cases = [...replyCases(), ...carrierCases()];

  it(`${cases.length} disguises through POST /v1/chat/completions (plain and streamed), POST /v1/runs (Prefer: wait) and POST /v1/chat/messages: 0 reach the caller`, async () => {
    const held: string[] = [];
    const leaked: string[] = [];
    const problems: string[] = [];
    for (const c of cases) {
      const host = uniqueHost("script");
      await scriptProvider(host, c.steps);
      const app = appForCase(host, c);
      const before = invocations.length;
      const { runId, answer, raw } = await drive(app, c);
      const run = await settled(app, runId);
      const seen = await everywhere(app, runId, raw);
      const found = c.probes.filter((p) => seen.includes(p));
      if (found.length === 0) held.push(c.name);
      else leaked.push(`${c.name} (${c.surface}): ${JSON.stringify(found)}`);
      problems.push(...(await answeredAsExpected(app, c, runId, run, answer, invocations.length - before)));
    }
    console.log(
      `ISSUE20-§2 disguises held: ${held.length}/${cases.length} (reach the caller: ${leaked.length})${leaked.length ? `\n${leaked.join("\n")}` : ""}`,
    );
    expect(leaked).toEqual([]);
    expect(held.length).toBe(cases.length);
    expect(problems).toEqual([]);
  }, 180_000);
});
