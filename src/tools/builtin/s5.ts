/**
 * S5 contract tools (S5 "Tool Surface", §6.2, §6.6; DESIGN "Where tools run"). All six are
 * gateway-mediated handlers that need the session's side of the call (`ctx.session`, a
 * `SessionToolHost`); without one they fail closed with `sandbox.unavailable`.
 *
 * - `verify` copies evidence files from a workspace folder (default `.verification`) into the
 *   run bundle in AUDIT, create-only.
 * - `save_snapshot` stores the session checkpoint as a named snapshot in AUDIT; the id is derived
 *   from the session and the tool call, so a retried call (S5 §6.3) finds its own snapshot.
 * - `automation.complete` (alias `automation_complete`) finishes an automation run, idempotent by
 *   `completion_id`.
 * - `save_service_commands` / `save_env_files` (setup-only, S5 §6.2; refused at run time in other
 *   sessions too) persist setup records in D1 — specs only, never secret values.
 * - `request_env_variables` records a request for keys in D1 and returns at once.
 *
 * S1 §3.1 forbids a property named `format` in a model-facing schema, so `save_env_files` takes
 * `file_format`; `s5WireArgs` maps S5's callback args (`format`) onto it.
 */

import { z } from "zod";
import { sha256Hex } from "../../prompts/hash";
import { runArtifactPath } from "../../runs/view";
import { AGENT_ID } from "../../sessions/keys";
import { noteServiceCommandsSaved } from "../../storage/setup-records";
import { type PathRefusal, resolveWorkspacePath } from "../paths";
import { defineTool, type SessionToolHost, type ToolContext, type ToolDefinition, type ToolOutcome } from "../registry";
import { ABORTED, timedOut, untilAborted } from "./common";

// ---------------------------------------------------------------------------------------------
// Shared pieces

const MiB = 1024 * 1024;

/** `verify`: the folder copied when none is given. */
export const DEFAULT_EVIDENCE_FOLDER = ".verification";
/** `verify` limits: files per call, bytes per file, bytes per call. */
export const MAX_EVIDENCE_FILES = 20;
export const MAX_EVIDENCE_FILE_BYTES = 5 * MiB;
export const MAX_EVIDENCE_TOTAL_BYTES = 20 * MiB;

/** An environment variable name (S5 `keys[].key`). */
export const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** A service command's name. */
export const SERVICE_NAME = /^[A-Za-z0-9][A-Za-z0-9 _.-]*$/;
/**
 * A relative path for setup records: not absolute (`/x`, `~`, `~/x`, `C:`), no `..` segment, no
 * backslash or control character (C0, DEL, C1).
 */
export function isRelativePath(path: string): boolean {
  return !/^(?:\/|~(?:\/|$)|[A-Za-z]:)/.test(path) && !path.split("/").includes("..") && !path.includes("\\") && !/\p{Cc}/u.test(path);
}

/** A relative path field; the rule is a refinement (not a JSON Schema `pattern`), stated in the description. */
const relativePath = (description: string) =>
  z.string().min(1).max(500).refine(isRelativePath, "must be a relative path without '..' segments").describe(description);

/** Thrown inside a handler when the call's signal fires; becomes the `timeout` outcome. */
class Aborted extends Error {}

/** Awaits a storage call, or throws `Aborted` as soon as the call's signal fires. */
async function step<T>(promise: Promise<T>, ctx: ToolContext): Promise<T> {
  const result = await untilAborted(promise, ctx.signal);
  if (result === ABORTED) throw new Aborted();
  return result;
}

/**
 * Runs an S5 handler: it needs the session's side of the call, and a fired signal anywhere
 * inside becomes `timeout`.
 */
async function withSession(
  tool: string,
  ctx: ToolContext,
  body: (session: SessionToolHost) => Promise<ToolOutcome>,
  options: { setupOnly?: boolean } = {},
): Promise<ToolOutcome> {
  const session = ctx.session;
  if (!session) return fail("sandbox.unavailable", `${tool} runs only inside a session`);
  if (options.setupOnly && session.sessionType !== "setup") return fail("policy.denied", `${tool} is available only in setup sessions`);
  try {
    return await body(session);
  } catch (err) {
    if (err instanceof Aborted) return timedOut(tool, ctx);
    throw err;
  }
}

function fail(code: Extract<ToolOutcome, { ok: false }>["error"]["code"], message: string): ToolOutcome {
  return { ok: false, error: { code, message } };
}

/** `12.3 KiB`, `4 bytes`, `5.0 MiB`. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} ${n === 1 ? "byte" : "bytes"}`;
  if (n < MiB) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / MiB).toFixed(1)} MiB`;
}

/** `n thing`/`n things`. */
const count = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** One R2 key segment for an outside id: percent-encoded, and never `.` or `..`. */
export function keySegment(id: string): string {
  const encoded = encodeURIComponent(id);
  return encoded === "." || encoded === ".." ? encoded.replaceAll(".", "%2E") : encoded;
}

/** A refinement that flags each item whose `keyOf` repeats an earlier one, at `[i, field]` and naming `item[field]`. */
function unique<T extends object>(keyOf: (item: T) => string, field: keyof T & string, what: string) {
  return (items: readonly T[], ctx: z.RefinementCtx) => {
    const seen = new Set<string>();
    for (const [i, item] of items.entries()) {
      const key = keyOf(item);
      if (seen.has(key)) ctx.addIssue({ code: "custom", path: [i, field], message: `duplicate ${what} ${JSON.stringify(item[field])}` });
      seen.add(key);
    }
  };
}

/** 24 random lower-case hex digits (96 bits). */
function randomHex24(): string {
  return [...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, "0")).join("");
}

// ---------------------------------------------------------------------------------------------
// verify

const VerifyInput = z.strictObject({
  folder: z
    .string()
    .min(1)
    .max(1024)
    .default(DEFAULT_EVIDENCE_FOLDER)
    .describe("Workspace folder holding the evidence files, relative to the workspace root (default .verification)"),
});

/** One copied evidence file. */
export interface EvidenceFile {
  /** Path inside the folder. */
  path: string;
  bytes: number;
  sha256: string;
}

/** Where `verify` copies evidence in AUDIT: the run bundle when the call has a run, else the session's folder. */
export function evidencePrefix(agentId: string, session: Pick<SessionToolHost, "runId">, sessionKey: string, toolCallId: string): string {
  const base = session.runId
    ? `${runArtifactPath(agentId, session.runId)}/evidence`
    : `agents/${agentId}/sessions/${encodeURIComponent(sessionKey)}/evidence`;
  return `${base}/${keySegment(toolCallId)}/`;
}

export const verify: ToolDefinition = defineTool({
  name: "verify",
  description:
    "Submit verification evidence: copies every file in a workspace folder (default .verification) into the run's evidence bundle. " +
    "Write screenshots, logs or test output there first. At most 20 files, each at most 5 MiB, 20 MiB in all.",
  input: VerifyInput,
  risk: "draft_only",
  handler: (input, ctx) =>
    withSession("verify", ctx, async (session) => {
      const resolved = resolveWorkspacePath(ctx.agentId, input.folder);
      if (!resolved.ok) return refusedPath(resolved.reason);
      if (!resolved.relative) return fail("tool.input_invalid", "folder names the workspace root; pass a folder such as .verification");
      const folder = resolved.relative;
      const source = `${resolved.key}/`;

      // List everything under the folder (R2 pages may be short while still truncated: follow the cursor).
      const listed: { key: string; path: string; size: number }[] = [];
      let cursor: string | undefined;
      do {
        const page = await step(ctx.env.WORKSPACE.list({ prefix: source, limit: 1000, ...(cursor ? { cursor } : {}) }), ctx);
        for (const obj of page.objects) {
          const path = obj.key.slice(source.length);
          if (!path || path.endsWith("/")) continue; // a directory marker, not a file
          listed.push({ key: obj.key, path, size: obj.size });
        }
        cursor = page.truncated ? page.cursor : undefined;
      } while (cursor && listed.length <= MAX_EVIDENCE_FILES);

      // Every limit is checked before anything is copied.
      if (listed.length === 0) return fail("tool.input_invalid", `no files in ${folder}/ — write evidence files there first`);
      if (listed.length > MAX_EVIDENCE_FILES)
        return fail(
          "tool.input_invalid",
          `${folder}/ holds more than ${MAX_EVIDENCE_FILES} files; keep at most ${MAX_EVIDENCE_FILES} evidence files there`,
        );
      let total = 0;
      for (const file of listed) {
        const clean = resolveWorkspacePath(ctx.agentId, file.path);
        if (!clean.ok || clean.relative !== file.path)
          return fail("tool.input_invalid", `${folder}/${file.path} is not a plain relative path; rename it`);
        if (file.size > MAX_EVIDENCE_FILE_BYTES)
          return fail("tool.input_invalid", `${folder}/${file.path} is ${formatBytes(file.size)}; each evidence file may be at most 5 MiB`);
        total += file.size;
      }
      if (total > MAX_EVIDENCE_TOTAL_BYTES)
        return fail("tool.input_invalid", `the files in ${folder}/ total ${formatBytes(total)}; at most 20 MiB may be copied`);

      const prefix = evidencePrefix(ctx.agentId, session, ctx.sessionKey, ctx.toolCallId);
      const files: EvidenceFile[] = [];
      for (const file of listed) {
        const obj = await step(ctx.env.WORKSPACE.get(file.key), ctx);
        if (!obj) return fail("invalid.request", `${folder}/${file.path} disappeared while it was being copied; call verify again`);
        const bytes = new Uint8Array(await step(obj.arrayBuffer(), ctx));
        if (bytes.length > MAX_EVIDENCE_FILE_BYTES)
          return fail(
            "tool.input_invalid",
            `${folder}/${file.path} is ${formatBytes(bytes.length)}; each evidence file may be at most 5 MiB`,
          );
        const sha256 = await sha256Hex(bytes);
        const key = `${prefix}${file.path}`;
        // Create-only: evidence is never replaced. A retry of this call finds its own copy (same bytes).
        const put = await step(
          ctx.env.AUDIT.put(key, bytes, {
            onlyIf: { etagDoesNotMatch: "*" },
            ...(obj.httpMetadata ? { httpMetadata: obj.httpMetadata } : {}),
            customMetadata: { sha256 },
          }),
          ctx,
        );
        if (!put) {
          const existing = await step(ctx.env.AUDIT.get(key), ctx);
          const same = existing !== null && (await sha256Hex(new Uint8Array(await step(existing.arrayBuffer(), ctx)))) === sha256;
          if (!same)
            return fail(
              "invalid.request",
              `evidence ${file.path} was already copied by this tool call with different content; evidence is never replaced`,
            );
        }
        files.push({ path: file.path, bytes: bytes.length, sha256 });
      }

      const bytes = files.reduce((sum, f) => sum + f.bytes, 0);
      session.audit("tool.verify", { folder, files: files.length, prefix });
      return {
        ok: true,
        output: { folder, files, prefix },
        summary: `copied ${count(files.length, "evidence file")} (${formatBytes(bytes)})`,
      };
    }),
});

/** A refused `verify` folder, answered as the fs tools answer (S4 §4: escapes are `policy.denied`). */
function refusedPath(reason: PathRefusal): ToolOutcome {
  switch (reason) {
    case "too_long":
      return fail("tool.input_invalid", "folder is longer than 1024 bytes");
    case "invalid_agent_id":
      return fail("policy.denied", "this agent has no workspace");
    case "control_character":
    case "backslash":
    case "absolute":
    case "traversal":
    case "encoded_traversal":
      return fail("policy.denied", "folder escapes the workspace");
  }
}

// ---------------------------------------------------------------------------------------------
// save_snapshot

const SaveSnapshotInput = z.strictObject({
  message: z.string().max(1000).optional().describe("What this snapshot captures, at most 1000 characters"),
});

/** A stored snapshot, exactly as written to AUDIT. */
export interface SessionSnapshot {
  snapshot_id: string;
  session_key: string;
  session_id: string;
  run_id: string | null;
  tool_call_id: string;
  message: string | null;
  created_at: string;
  checkpoint: ReturnType<SessionToolHost["checkpoint"]>;
}

/** `snap_` + the first 24 hex digits of SHA-256(`{sessionKey}\n{toolCallId}`): a retried call gets the same id. */
export async function snapshotId(sessionKey: string, toolCallId: string): Promise<string> {
  return `snap_${(await sha256Hex(`${sessionKey}\n${toolCallId}`)).slice(0, 24)}`;
}

/** Where a snapshot is stored in AUDIT. */
export const snapshotKey = (agentId: string, id: string): string => `agents/${agentId}/snapshots/${id}.json`;

export const saveSnapshot: ToolDefinition = defineTool({
  name: "save_snapshot",
  description:
    "Save a named snapshot of this session's current checkpoint, so the session can be restored to this point later. Returns the snapshot_id.",
  input: SaveSnapshotInput,
  risk: "draft_only",
  handler: (input, ctx) =>
    withSession("save_snapshot", ctx, async (session) => {
      if (!AGENT_ID.test(ctx.agentId)) return fail("policy.denied", "this agent cannot store snapshots");
      const id = await snapshotId(ctx.sessionKey, ctx.toolCallId);
      const key = snapshotKey(ctx.agentId, id);
      const snapshot: SessionSnapshot = {
        snapshot_id: id,
        session_key: ctx.sessionKey,
        session_id: session.sessionId,
        run_id: session.runId,
        tool_call_id: ctx.toolCallId,
        message: input.message ?? null,
        created_at: new Date().toISOString(),
        checkpoint: session.checkpoint(),
      };
      const put = await step(
        ctx.env.AUDIT.put(key, JSON.stringify(snapshot), {
          onlyIf: { etagDoesNotMatch: "*" },
          httpMetadata: { contentType: "application/json" },
          // What the admin snapshot list filters on without reading every body (src/http/admin/snapshots.ts).
          customMetadata: { session_key: ctx.sessionKey, session_id: session.sessionId, created_at: snapshot.created_at },
        }),
        ctx,
      );
      let stored = snapshot;
      if (!put) {
        // Taken: a retry of this very call (snapshot boundaries retry with the same tool_call_id, S5 §6.3) is a success.
        const existing = await step(ctx.env.AUDIT.get(key), ctx);
        const previous = existing ? (JSON.parse(await step(existing.text(), ctx)) as SessionSnapshot) : null;
        if (!previous || previous.session_key !== ctx.sessionKey || previous.tool_call_id !== ctx.toolCallId)
          return { ok: false, error: { code: "internal.error", message: `snapshot ${id} could not be stored`, retryable: false } };
        stored = previous;
      }
      const revision = stored.checkpoint.revision;
      return {
        ok: true,
        output: { snapshot_id: id, key, revision },
        summary: `saved snapshot ${id} at checkpoint revision ${revision}`,
      };
    }),
});

// ---------------------------------------------------------------------------------------------
// automation.complete

export const AUTOMATION_OUTCOMES = ["succeeded", "failed", "needs_human"] as const;

const AutomationCompleteInput = z.strictObject({
  run_id: z.string().min(1).max(200).describe("The automation run being finished, as given in the run's instructions"),
  completion_id: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9_.:-]*$/, "may contain only A-Z a-z 0-9 _ . : -")
    .describe("Idempotency key for this completion (1-128 characters of A-Z a-z 0-9 _ . : -); reuse it when retrying"),
  outcome: z.enum(AUTOMATION_OUTCOMES).describe("How the run ended: succeeded, failed, or needs_human when a person must step in"),
  summary: z.string().max(20_000).optional().describe("What was done and what was found, at most 20000 characters"),
});

export const automationComplete: ToolDefinition = defineTool({
  name: "automation.complete",
  aliases: ["automation_complete"],
  description:
    "Finish the current automation run with its outcome and a summary. Call it exactly once at the end of an automation run; " +
    "retrying with the same completion_id is safe.",
  input: AutomationCompleteInput,
  risk: "draft_only",
  handler: (input, ctx) =>
    withSession("automation.complete", ctx, async (session) => {
      const result = session.recordCompletion({
        completion_id: input.completion_id,
        run_id: input.run_id,
        outcome: input.outcome,
        summary: input.summary ?? null,
        tool_call_id: ctx.toolCallId,
      });
      switch (result.status) {
        case "recorded": {
          const completion = result.completion ?? {
            completion_id: input.completion_id,
            run_id: input.run_id,
            outcome: input.outcome,
            summary: input.summary ?? null,
            tool_call_id: ctx.toolCallId,
            recorded_at: new Date().toISOString(),
          };
          return {
            ok: true,
            output: completion,
            summary: `automation run ${completion.run_id} completed: ${completion.outcome}`,
          };
        }
        case "duplicate": {
          if (!result.completion) return fail("internal.error", "the earlier completion could not be read");
          const completion = result.completion;
          return {
            ok: true,
            output: { ...completion, duplicate: true },
            summary: `automation run ${completion.run_id} was already completed: ${completion.outcome}`,
          };
        }
        case "conflict":
          return fail(
            "invalid.request",
            `completion_id ${input.completion_id} was already recorded with a different run or outcome; use a new completion_id`,
          );
        case "unknown_run":
          return fail("invalid.request", `run ${input.run_id} is not a run of this session`);
        case "other_run":
          return fail("invalid.request", `run ${input.run_id} is not this run; pass the run_id given in this run's instructions`);
      }
    }),
});

// ---------------------------------------------------------------------------------------------
// save_service_commands (setup-only)

export const MAX_SERVICE_COMMANDS = 10;

const ServiceCommand = z.strictObject({
  name: z
    .string()
    .min(1)
    .max(100)
    .regex(SERVICE_NAME, "must start with a letter or digit and contain only letters, digits, spaces, _ . -")
    .describe("Service name, unique in the list: letters, digits, spaces, _ . - (1-100 characters)"),
  command: z
    .string()
    .min(1)
    .max(1000)
    .regex(/^[^\r\n]+$/, "must be one line")
    .describe("Shell command that starts the service, one line of at most 1000 characters"),
  cwd: relativePath("Working directory, relative to the workspace path (no absolute paths, no '..')").optional(),
  workspacePath: relativePath("Which repository in a multi-repo workspace the command belongs to, as a relative path").optional(),
});

const SaveServiceCommandsInput = z.strictObject({
  commands: z
    .array(ServiceCommand)
    .min(1)
    .max(MAX_SERVICE_COMMANDS)
    .superRefine(unique((c) => c.name, "name", "name"))
    .describe("The commands that start this environment's services (1-10); replaces any saved before"),
});

/** Upserts one setup record of the agent. */
async function saveSetupRecord(ctx: ToolContext, session: SessionToolHost, kind: "service_commands" | "env_files", payload: unknown) {
  await step(
    ctx.env.DB.prepare(
      `INSERT INTO setup_records (agent_id, kind, payload, session_id, tool_call_id, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
       ON CONFLICT (agent_id, kind) DO UPDATE SET payload = excluded.payload, session_id = excluded.session_id,
         tool_call_id = excluded.tool_call_id, updated_at = excluded.updated_at`,
    )
      .bind(ctx.agentId, kind, JSON.stringify(payload), session.sessionId, ctx.toolCallId, new Date().toISOString())
      .run(),
    ctx,
  );
  if (kind === "service_commands") noteServiceCommandsSaved(ctx.agentId);
}

export const saveServiceCommands: ToolDefinition = defineTool({
  name: "save_service_commands",
  description:
    "Setup sessions only: save the commands that start this environment's services (for example a dev server or a database), " +
    "so later sessions can start them. Replaces the previously saved list.",
  input: SaveServiceCommandsInput,
  risk: "draft_only",
  setupOnly: true,
  // Later sessions run these commands: a model (or a prompt injection) must not choose them alone (issue 20 §6).
  approvalNeeded: () => "save_service_commands changes the commands this agent's services run: a human must approve it",
  handler: (input, ctx) =>
    withSession(
      "save_service_commands",
      ctx,
      async (session) => {
        await saveSetupRecord(ctx, session, "service_commands", { commands: input.commands });
        return { ok: true, output: { saved: input.commands.length }, summary: `saved ${count(input.commands.length, "service command")}` };
      },
      { setupOnly: true },
    ),
});

// ---------------------------------------------------------------------------------------------
// save_env_files (setup-only)

export const MAX_ENV_FILES = 10;
export const MAX_ENV_KEYS = 50;

const EnvFileKey = z.strictObject({
  key: z.string().regex(ENV_KEY, "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)").describe("Variable name"),
  required: z.boolean().optional().describe("Whether the environment cannot work without this variable"),
  description: z.string().max(500).optional().describe("What the variable is for, at most 500 characters"),
});

const EnvFile = z.strictObject({
  path: relativePath("Where the file is written, relative to the workspace path (e.g. .env.local; no absolute paths, no '..')"),
  workspacePath: relativePath("Which repository in a multi-repo workspace the file belongs to, as a relative path").optional(),
  file_format: z.enum(["dotenv"]).describe("File format; dotenv (KEY=value lines)"),
  mode: z.enum(["secret"]).describe("How values are supplied: secret (from the secret store, never written here)"),
  keys: z
    .array(EnvFileKey)
    .min(1)
    .max(MAX_ENV_KEYS)
    .superRefine(unique((k) => k.key, "key", "key"))
    .describe("The variables the file holds (1-50): names and descriptions only, never values"),
});

const SaveEnvFilesInput = z.strictObject({
  files: z
    .array(EnvFile)
    .min(1)
    .max(MAX_ENV_FILES)
    .superRefine(unique((f) => `${f.workspacePath ?? ""}\n${f.path}`, "path", "path"))
    .describe("The env files to generate in later sessions (1-10); replaces any saved before"),
});

/**
 * Variables that steer what a process loads or runs rather than configure it (exact names, then prefixes,
 * upper-cased): an env file that sets one changes what will be executed.
 */
// biome-ignore format: a list of names reads better packed
const EXECUTION_VARIABLES = new Set([
  "PATH", "ENV", "BASH_ENV", "SHELL", "SHELLOPTS", "PROMPT_COMMAND", "PS4", "IFS", "NODE_OPTIONS", "NODE_PATH",
  "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB",
  "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "EDITOR", "VISUAL", "PAGER", "BROWSER",
]);
const EXECUTION_PREFIXES = ["LD_", "DYLD_", "GIT_", "NPM_CONFIG_", "YARN_", "PIP_", "SSH_"];
/** A file name that is plainly a dotenv file: `.env`, `.env.local`, `prod.env`. */
const DOTENV_NAME = /^(?:\.env(?:\.[A-Za-z0-9_-]+)*|[A-Za-z0-9_-]+\.env)$/;

/**
 * Why saving these env files needs a human (issue 20 §6), or null: a file outside the plain dotenv names, in a
 * hidden folder (`.git/`, `.ssh/`), or a variable that steers execution changes what later sessions run.
 */
export function envFilesApprovalReason(args: unknown): string | null {
  const files = (args as { files?: unknown } | null)?.files;
  if (!Array.isArray(files)) return "save_env_files with unreadable arguments: a human must approve it";
  for (const file of files as { path?: unknown; workspacePath?: unknown; keys?: unknown }[]) {
    const path = typeof file?.path === "string" ? file.path : "";
    const folders = [...(typeof file?.workspacePath === "string" ? file.workspacePath.split("/") : []), ...path.split("/").slice(0, -1)];
    if (!DOTENV_NAME.test(path.split("/").at(-1) ?? "") || folders.some((f) => f.startsWith(".")))
      return `save_env_files writes ${JSON.stringify(path.slice(0, 100))}, which is not a plain .env file: a human must approve it`;
    for (const key of Array.isArray(file.keys) ? (file.keys as { key?: unknown }[]) : []) {
      const name = String(key?.key ?? "").toUpperCase();
      if (EXECUTION_VARIABLES.has(name) || EXECUTION_PREFIXES.some((p) => name.startsWith(p)))
        return `save_env_files sets ${name.slice(0, 128)}, which changes what programs load or run: a human must approve it`;
    }
  }
  return null;
}

export const saveEnvFiles: ToolDefinition = defineTool({
  name: "save_env_files",
  description:
    "Setup sessions only: save which env files later sessions need and which keys each holds, so they can be generated from the " +
    "secret store. Only names and descriptions are saved — never put secret values here. Replaces the previously saved list.",
  input: SaveEnvFilesInput,
  risk: "draft_only",
  setupOnly: true,
  approvalNeeded: envFilesApprovalReason,
  handler: (input, ctx) =>
    withSession(
      "save_env_files",
      ctx,
      async (session) => {
        // Stored in S5's own shape (`format`); the model-facing `file_format` exists only because of S1 §3.1.
        const files = input.files.map(({ file_format, ...rest }) => ({
          path: rest.path,
          ...(rest.workspacePath !== undefined ? { workspacePath: rest.workspacePath } : {}),
          format: file_format,
          mode: rest.mode,
          keys: rest.keys,
        }));
        await saveSetupRecord(ctx, session, "env_files", { files });
        const keys = files.reduce((n, f) => n + f.keys.length, 0);
        return {
          ok: true,
          output: { saved: files.length },
          summary: `saved ${count(files.length, "env file")} with ${count(keys, "key")}`,
        };
      },
      { setupOnly: true },
    ),
});

// ---------------------------------------------------------------------------------------------
// request_env_variables

export const MAX_REQUESTED_KEYS = 50;

const RequestedKey = z.strictObject({
  key: z.string().regex(ENV_KEY, "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)").describe("Variable name"),
  type: z.enum(["env", "secret"]).optional().describe("env for a plain setting, secret for a credential"),
  required: z.boolean().optional().describe("Whether the work cannot go on without this variable"),
  description: z.string().max(500).optional().describe("What the variable is for and where to find it, at most 500 characters"),
  suggestions: z.array(z.string().max(200).describe("A suggested value")).max(10).optional().describe("Up to 10 suggested values"),
});

const RequestEnvVariablesInput = z.strictObject({
  keys: z
    .array(RequestedKey)
    .min(1)
    .max(MAX_REQUESTED_KEYS)
    .superRefine(unique((k) => k.key, "key", "key"))
    .describe("The variables to ask the person for (1-50)"),
});

export const requestEnvVariables: ToolDefinition = defineTool({
  name: "request_env_variables",
  description:
    "Ask the person to provide environment variables or secrets. Returns at once with a request_id; the values arrive in the " +
    "environment later — do not wait for them in this call.",
  input: RequestEnvVariablesInput,
  risk: "draft_only",
  handler: (input, ctx) =>
    withSession("request_env_variables", ctx, async (session) => {
      const db = ctx.env.DB;
      // One request per tool call: a retried call (same session and tool_call_id) finds the first.
      await step(
        db
          .prepare(
            `INSERT INTO env_requests (id, agent_id, session_id, run_id, tool_call_id, keys, status, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'open', ?7) ON CONFLICT (session_id, tool_call_id) DO NOTHING`,
          )
          .bind(
            `envreq_${randomHex24()}`,
            ctx.agentId,
            session.sessionId,
            session.runId,
            ctx.toolCallId,
            JSON.stringify(input.keys),
            new Date().toISOString(),
          )
          .run(),
        ctx,
      );
      const row = await step(
        db
          .prepare("SELECT id, keys FROM env_requests WHERE session_id = ?1 AND tool_call_id = ?2")
          .bind(session.sessionId, ctx.toolCallId)
          .first<{ id: string; keys: string }>(),
        ctx,
      );
      if (!row) return fail("internal.error", "the request could not be recorded");
      const keys = (JSON.parse(row.keys) as unknown[]).length;
      return {
        ok: true,
        output: { request_id: row.id, status: "recorded", keys },
        summary: `requested ${count(keys, "environment variable")} (${row.id}); the values arrive later`,
      };
    }),
});

// ---------------------------------------------------------------------------------------------

/** The six S5 tools, in S5's order. */
export const S5_TOOLS = [verify, saveSnapshot, automationComplete, saveServiceCommands, saveEnvFiles, requestEnvVariables] as const;

/**
 * Maps S5 callback args (`POST …/tools/:toolName`, S5 "Gateway Callback Contract") onto the tool's input:
 * for `save_env_files`, each `files[i].format` becomes `files[i].file_format` (S1 §3.1 forbids a property
 * named `format` in the model-facing schema). Everything else, and every other tool, is passed through.
 */
export function s5WireArgs(toolName: string, args: unknown): unknown {
  if (toolName !== "save_env_files" || !isRecord(args) || !Array.isArray(args.files)) return args;
  return {
    ...args,
    files: args.files.map((file: unknown) => {
      if (!isRecord(file) || !Object.hasOwn(file, "format") || Object.hasOwn(file, "file_format")) return file;
      const { format, ...rest } = file;
      return { ...rest, file_format: format };
    }),
  };
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
