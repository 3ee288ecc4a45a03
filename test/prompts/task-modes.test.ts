/**
 * Issue 21 items 7 and 5: task modes at runtime, and prompts that only name tools the run is offered.
 * With the shipped config (config/gateway.json5, its provider pointed at the mock), every mode is driven
 * through the HTTP surface (or a job firing) and read back from the admin run view and the provider request:
 * scratch and coding through POST /v1/chat/messages, setup through POST /api/admin/setup-sessions, automation
 * through a scheduler tick.
 */
import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { bundledConfig } from "../../src/config/load";
import type { GatewayConfig } from "../../src/config/schema";
import { createLogger } from "../../src/observability/logger";
import { requirePrompt } from "../../src/prompts/catalog";
import { createJob, JobWrite } from "../../src/scheduler/jobs";
import { runSchedulerTick } from "../../src/scheduler/tick";
import { tools } from "../../src/tools/registry";
import "../../src/tools/builtin";
import { bodiesSentTo, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, appFor, call, runDetail, until } from "../support/runs";

/** The shipped config, its moonshot provider sent to the mock scenario `host`; `coder` is a copy of `main`. */
function shipped(host: string): GatewayConfig {
  const config = structuredClone(bundledConfig());
  const moonshot = config.models.providers.moonshot;
  if (!moonshot) throw new Error("the shipped config has no moonshot provider");
  moonshot.baseUrl = `https://${host}/v1`;
  config.agents.coder = structuredClone(config.agents.main as NonNullable<GatewayConfig["agents"][string]>);
  return config;
}

const SHIPPED_MAIN = ["email.draft", "fs.list_dir", "fs.read_text", "fs.write_text", "http.get", "message.send"];
const SETUP_TOOLS = ["request_env_variables", "save_env_files", "save_service_commands", "save_snapshot", "verify"];

/**
 * Every registered tool the text names, as canonical names, sorted. A name with a dot or an underscore is an
 * identifier wherever it stands; a plain word (`verify`) names the tool only as "call verify" — "verify it with
 * the tools you have" (tasks/coding) is the English verb.
 */
function toolsNamedIn(text: string): string[] {
  const named = new Set<string>();
  for (const def of tools.list())
    for (const name of [def.name, ...(def.aliases ?? [])]) {
      const escaped = name.replaceAll(".", "\\.");
      const before = /[._]/.test(name) ? "(^|[^A-Za-z0-9_.])" : "\\bcall ";
      if (new RegExp(`${before}${escaped}($|[^A-Za-z0-9_])`).test(text)) named.add(def.name);
    }
  return [...named].sort();
}

/** What the run's first provider request carried: its L5 system message and the offered tools (canonical). */
async function firstRequest(host: string): Promise<{ l5: string | undefined; offered: string[] }> {
  const [body] = await bodiesSentTo(host);
  if (!body) throw new Error("the provider saw no request");
  const system = body.messages.filter((m) => m.role === "system").map((m) => m.content as string);
  const offered = (body.tools ?? []).map((t: { function: { name: string } }) => t.function.name.replaceAll("__", "."));
  return { l5: system[4], offered: offered.sort() };
}

/** The L5 entry of the run's first manifest (admin view) and its notes. */
async function l5Of(app: ReturnType<typeof appFor>, runId: string) {
  const detail = await runDetail(app, runId);
  const manifest = detail.manifests[0].manifest;
  return { entry: manifest.stack.find((e: { layer: string }) => e.layer === "L5"), notes: manifest.notes as string[], detail };
}

async function chat(app: ReturnType<typeof appFor>, agentId: string, message: string): Promise<string> {
  const res = await call(app, "POST", "/v1/chat/messages", {
    user_id: "u",
    room_id: `r-${crypto.randomUUID()}`,
    agent_id: agentId,
    message,
  });
  expect(res.status).toBe(202);
  const id = res.body.id as string;
  await until(async () => ["completed", "failed"].includes((await runDetail(app, id)).run.status));
  return id;
}

/** What a setup session's save_service_commands writes for an agent (migrations/0009_setup_records.sql). */
async function saveServiceCommands(agentId: string) {
  await env.DB.prepare(
    "INSERT INTO setup_records (agent_id, kind, payload, session_id, tool_call_id, updated_at) VALUES (?1, 'service_commands', ?2, 'ses_x', 'call_x', ?3)",
  )
    .bind(agentId, JSON.stringify({ commands: [{ name: "web", command: "npm run dev" }] }), new Date().toISOString())
    .run();
}

/** Fires one isolated job of `agentId` through the scheduler tick and returns its run id. */
async function fireJob(config: GatewayConfig, agentId: string, jobId: string): Promise<string> {
  const write = JobWrite.parse({
    job_id: jobId,
    agent_id: agentId,
    message: "nightly report",
    schedule: "@every 1h",
    mode: "isolated",
    enabled: true,
  });
  const created = await createJob(env.DB, write, new Date("2030-01-01T10:00:00Z"));
  if (!created.ok) throw new Error(`createJob refused: ${JSON.stringify(created)}`);
  const controller = createScheduledController({ scheduledTime: new Date("2030-01-01T11:00:00Z"), cron: "* * * * *" });
  await runSchedulerTick(env, controller, createLogger("error"), { config });
  const row = await env.DB.prepare("SELECT run_id FROM job_firings WHERE job_id = ?1").bind(jobId).first<{ run_id: string }>();
  if (!row?.run_id) throw new Error("the job did not fire");
  return row.run_id;
}

afterEach(async () => {
  await env.DB.batch([
    env.DB.prepare("DELETE FROM jobs"),
    env.DB.prepare("DELETE FROM job_firings"),
    env.DB.prepare("DELETE FROM setup_records"),
  ]);
});

describe("ISSUE21-7 task modes at runtime (S5 precedence), shown in the run's manifest", () => {
  it("ISSUE21-7 an unconfigured agent's chat run gets L5 tasks/scratch", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "hello" }]);
    const app = appFor(shipped(host));
    const id = await chat(app, "main", "hi");
    const { entry } = await l5Of(app, id);
    const scratch = requirePrompt("tasks/scratch");
    expect(entry).toMatchObject({ layer: "L5", id: "tasks/scratch", file: scratch.file, sha256: scratch.sha256, source: "file" });
    expect((await firstRequest(host)).l5).toBe(scratch.content);
  });

  it("ISSUE21-7 an agent with saved service commands (a configured coding agent) gets L5 tasks/coding", async () => {
    await saveServiceCommands("coder");
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "hello" }, { content: "again" }]);
    const app = appFor(shipped(host));
    const coding = requirePrompt("tasks/coding");
    const id = await chat(app, "coder", "fix the build");
    expect((await l5Of(app, id)).entry).toMatchObject({ layer: "L5", id: "tasks/coding", file: coding.file, sha256: coding.sha256 });
    expect((await firstRequest(host)).l5).toBe(coding.content);
    // The same gateway, agent main (nothing saved): still scratch — the rule is per agent.
    const other = await chat(app, "main", "hi");
    expect((await l5Of(app, other)).entry.id).toBe("tasks/scratch");
  });

  it("ISSUE21-7 a setup session (POST /api/admin/setup-sessions) gets L5 tasks/setup, configured or not", async () => {
    await saveServiceCommands("main");
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "ready" }]);
    const app = appFor(shipped(host));
    const res = await call(app, "POST", "/api/admin/setup-sessions", { agent_id: "main", message: "set up the project" }, ADMIN);
    expect(res.status).toBe(202);
    await until(async () => (await runDetail(app, res.body.id)).run.status === "completed");
    const setup = requirePrompt("tasks/setup");
    expect((await l5Of(app, res.body.id)).entry).toMatchObject({ id: "tasks/setup", file: setup.file, sha256: setup.sha256 });
    expect((await firstRequest(host)).l5).toBe(setup.content);
  });

  it("ISSUE21-7 a job run gets L5 tasks/automation = coding + addendum in one entry, noted in the manifest, unconfigured too", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "done" }]);
    const config = shipped(host);
    const id = await fireJob(config, "main", "modes-auto");
    const app = appFor(config);
    await until(async () => (await runDetail(app, id)).run.status === "completed");
    const coding = requirePrompt("tasks/coding");
    const addendum = requirePrompt("tasks/automation_addendum");
    const { entry, notes } = await l5Of(app, id);
    expect(entry).toMatchObject({ layer: "L5", id: "tasks/automation", file: `${coding.file}+${addendum.file}` });
    expect(notes).toContain(
      `L5 tasks/automation composed of tasks/coding (${coding.sha256}) + tasks/automation_addendum (${addendum.sha256})`,
    );
    expect((await firstRequest(host)).l5).toBe(`${coding.content}\n${addendum.content}`);
  });
});

describe("ISSUE21-5 prompts only name tools the run is offered (shipped config, agent main)", () => {
  it("ISSUE21-5 scratch and coding chat runs: L5 names no tool; the offer is main's allowlist", async () => {
    await saveServiceCommands("coder");
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "a" }]);
    const app = appFor(shipped(host));
    await chat(app, "main", "hi");
    const scratch = await firstRequest(host);
    expect(scratch.l5).toBe(requirePrompt("tasks/scratch").content);
    expect(toolsNamedIn(scratch.l5 ?? "")).toEqual([]);
    expect(scratch.offered).toEqual(SHIPPED_MAIN);
    const host2 = uniqueHost("script");
    await scriptProvider(host2, [{ content: "b" }]);
    await chat(appFor(shipped(host2)), "coder", "hi");
    const coding = await firstRequest(host2);
    expect(coding.l5).toBe(requirePrompt("tasks/coding").content);
    expect(toolsNamedIn(coding.l5 ?? "")).toEqual([]);
    expect(coding.offered).toEqual(SHIPPED_MAIN);
  });

  it("ISSUE21-5 a setup run is offered every setup tool its L5 names", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "ready" }]);
    const app = appFor(shipped(host));
    const res = await call(app, "POST", "/api/admin/setup-sessions", { agent_id: "main", message: "set up" }, ADMIN);
    await until(async () => (await runDetail(app, res.body.id)).run.status === "completed");
    const { l5, offered } = await firstRequest(host);
    const named = toolsNamedIn(l5 ?? "");
    expect(named).toEqual(SETUP_TOOLS);
    expect(offered).toEqual([...SHIPPED_MAIN, ...SETUP_TOOLS].sort());
    expect(named.filter((t) => !offered.includes(t))).toEqual([]);
  });

  it("ISSUE21-5 a job run is offered automation.complete, which its L5 names, and may call it", async () => {
    const host = uniqueHost("script");
    const args = { run_id: "x", completion_id: "c1", outcome: "succeeded" };
    await scriptProvider(host, [
      { tool_calls: [{ id: "ac1", name: "automation__complete", arguments: JSON.stringify(args) }] },
      { content: "done" },
    ]);
    const config = shipped(host);
    const id = await fireJob(config, "main", "modes-offer");
    const app = appFor(config);
    await until(async () => ["completed", "failed"].includes((await runDetail(app, id)).run.status));
    const { l5, offered } = await firstRequest(host);
    expect(toolsNamedIn(l5 ?? "")).toEqual(["automation.complete"]);
    expect(offered).toEqual(["automation.complete", ...SHIPPED_MAIN].sort());
    const decided = (await runDetail(app, id)).events.find((e: any) => e.event_type === "tool.result");
    // The gate admits it (mode tool, draft_only allowed); what the handler then does with the call is item 1's.
    expect(decided.payload.gate).toEqual({
      channel: "job",
      policy_id: "default-v1",
      tool: "automation.complete",
      risk: "draft_only",
      outcome: "allowed",
      code: null,
      reason: "allowlisted",
    });
  });

  it("ISSUE21-5 outside a job run automation.complete is not offered, and a call to it finds no tool", async () => {
    const host = uniqueHost("script");
    const args = { run_id: "x", completion_id: "c1", outcome: "succeeded" };
    await scriptProvider(host, [
      { tool_calls: [{ id: "ac1", name: "automation__complete", arguments: JSON.stringify(args) }] },
      { content: "done" },
    ]);
    const app = appFor(shipped(host));
    const id = await chat(app, "main", "finish it");
    expect((await firstRequest(host)).offered).not.toContain("automation.complete");
    const result = (await runDetail(app, id)).events.find((e: any) => e.event_type === "tool.result");
    expect(result.payload).toMatchObject({
      ok: false,
      error: { code: "tool.not_found", message: 'no tool named "automation__complete"' },
    });
  });

  it("ISSUE21-5 mode tools stay under policy: with draft_only not an allowed risk class, a job's automation.complete is denied", async () => {
    const host = uniqueHost("script");
    const args = { run_id: "x", completion_id: "c1", outcome: "succeeded" };
    await scriptProvider(host, [
      { tool_calls: [{ id: "ac1", name: "automation__complete", arguments: JSON.stringify(args) }] },
      { content: "done" },
    ]);
    const config = shipped(host);
    config.tools.policy.risks = ["read_only", "side_effect"];
    const id = await fireJob(config, "main", "modes-policy");
    const app = appFor(config);
    await until(async () => ["completed", "failed"].includes((await runDetail(app, id)).run.status));
    const result = (await runDetail(app, id)).events.find((e: any) => e.event_type === "tool.result");
    expect(result.payload).toMatchObject({
      ok: false,
      error: { code: "policy.denied", message: "automation.complete is draft_only, a risk class this gateway does not allow" },
    });
  });

  it("ISSUE21-5 marker models: every tool a setup or job run's L5 names is in the L4 tool list", async () => {
    /** The shipped config with its model on the marker protocol (no native tool calls). */
    const markers = (host: string) => {
      const config = shipped(host);
      const model = config.models.providers.moonshot?.models["kimi-k1-128k"];
      if (!model) throw new Error("the shipped config has no kimi-k1-128k");
      model.supportsTools = false;
      return config;
    };
    /** The tools listed in L4 (the marker catalog) and the L5 text of the first request to `host`. */
    const listed = async (host: string) => {
      const [body] = await bodiesSentTo(host);
      const system = (body?.messages ?? []).filter((m) => m.role === "system").map((m) => m.content as string);
      const catalog = (system[3] ?? "").split("Your tool list:\n")[1] ?? "";
      return { l5: system[4] ?? "", tools: [...catalog.matchAll(/^- ([^:\s]+):/gm)].map((m) => m[1] as string).sort() };
    };
    const setupHost = uniqueHost("script");
    await scriptProvider(setupHost, [{ content: "ready" }]);
    const app = appFor(markers(setupHost));
    const res = await call(app, "POST", "/api/admin/setup-sessions", { agent_id: "main", message: "set up" }, ADMIN);
    await until(async () => (await runDetail(app, res.body.id)).run.status === "completed");
    const setup = await listed(setupHost);
    expect(toolsNamedIn(setup.l5)).toEqual(SETUP_TOOLS);
    expect(setup.tools).toEqual([...SHIPPED_MAIN, ...SETUP_TOOLS].sort());

    const jobHost = uniqueHost("script");
    await scriptProvider(jobHost, [{ content: "done" }]);
    const config = markers(jobHost);
    const id = await fireJob(config, "main", "modes-markers");
    await until(async () => (await runDetail(appFor(config), id)).run.status === "completed");
    const job = await listed(jobHost);
    expect(toolsNamedIn(job.l5)).toEqual(["automation.complete"]);
    expect(job.tools).toEqual(["automation.complete", ...SHIPPED_MAIN].sort());
  });
});
