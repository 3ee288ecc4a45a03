/**
 * Deterministic assembly of the six-layer prompt stack (S2 §2, §4; DESIGN §2).
 *
 * L1 base (mandatory) → L2 agent role → L3 channel policy → L4 tool policy →
 * L5 task (optional) → earlier turns → L6 user input. Nothing from the caller
 * can remove, replace or reorder L1, L3 or L4; an inline override replaces L2
 * only; user-derived text (history, retrieved memory, compaction summaries)
 * never goes above L6. The output is provider-neutral; `toChatMessages` and
 * `toCompletionPrompt` adapt it without changing the order.
 */
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { z } from "zod";
import { estimateMessagesTokens, MESSAGE_OVERHEAD_TOKENS } from "../context/budget";
import { estimateTokens } from "../context/tokens";
import type { Logger } from "../observability/logger";
import { BASE_PROMPT_ID, findPrompt, requirePrompt } from "./catalog";
import { classifyChannel } from "./channels";
import { sha256Hex } from "./hash";
import { MANIFEST_VERSION, type ManifestEntry, type PromptManifest, stackSha256 } from "./manifest";
import type { Layer } from "./types";

export const ToolPolicyId = z.enum(["native", "markers", "none"]);
export type ToolPolicyId = z.infer<typeof ToolPolicyId>;

export const TaskId = z.enum(["setup", "coding", "automation", "scratch"]);
export type TaskId = z.infer<typeof TaskId>;

/**
 * A turn of earlier conversation, already normalised by the context builder.
 * (Tool results of earlier turns arrive here as text; live tool rounds are the run engine's.)
 */
export const HistoryMessage = z.strictObject({
  role: z.enum(["user", "assistant"]),
  content: z.string(),
});
export type HistoryMessage = z.infer<typeof HistoryMessage>;

/** User-derived context that goes inside L6, before the user's message (DESIGN "Retrieved memory"). */
export const L6Context = z.strictObject({
  kind: z.enum(["retrieved_memory", "compaction_summary", "automation_run", "env_available"]),
  text: z.string().min(1),
  /** The memory items the block holds (S4 §5 ids), named in the manifest's note. */
  ids: z.array(z.string().min(1)).max(20).optional(),
});

/** The longest inline L2 (S5 `session.system_prompt`), in UTF-16 code units. */
export const MAX_INLINE_ROLE_CHARS = 32_000;

/** Assembly inputs (S2 §4.1). Strict: an unknown field is an error, never silently used or ignored. */
export const AssemblyInput = z.strictObject({
  agentId: z.string().min(1),
  channel: z.string().min(1),
  toolPolicy: ToolPolicyId,
  task: TaskId.optional(),
  /**
   * For the marker protocol: the tools the model may call (name, description, JSON Schema), rendered into
   * L4 after the protocol text — a model without native tools has no other way to learn them.
   */
  toolCatalog: z
    .array(z.strictObject({ name: z.string().min(1), description: z.string(), parameters: z.record(z.string(), z.unknown()) }))
    .default([]),
  /** Failure-loop recovery mode: adds the error_recovery instruction at L5 (S3 §2). */
  recovery: z.boolean().default(false),
  /** S5 `session.system_prompt`: replaces L2 only. */
  inlineRole: z.string().min(1).max(MAX_INLINE_ROLE_CHARS).optional(),
  history: z.array(HistoryMessage).default([]),
  l6Context: z.array(L6Context).default([]),
  userMessage: z.string(),
});
export type AssemblyInput = z.input<typeof AssemblyInput>;

/** One hidden layer's text as it goes to the provider. */
export interface SystemSegment {
  layer: Exclude<Layer, "L6">;
  id: string;
  content: string;
}

export interface AssembledPrompt {
  /** L1–L5, in order. */
  system: SystemSegment[];
  /** Earlier turns, between the system layers and L6. */
  history: HistoryMessage[];
  /** L6: user-derived context blocks followed by the user's message. */
  user: string;
  /** Estimated tokens of `user`. */
  userTokens: number;
  manifest: PromptManifest;
}

const CONTEXT_HEADERS = {
  retrieved_memory: ["=== RETRIEVED_MEMORY ===", "=== END_RETRIEVED_MEMORY ==="],
  compaction_summary: ["=== CONVERSATION_SUMMARY ===", "=== END_CONVERSATION_SUMMARY ==="],
  // A job run's own id, which `automation.complete` must name (issue 21 §1).
  automation_run: ["=== AUTOMATION_RUN ===", "=== END_AUTOMATION_RUN ==="],
  // The names (never values) of environment variables an admin supplied for this session (issue 21 §2).
  env_available: ["=== ENVIRONMENT_AVAILABLE ===", "=== END_ENVIRONMENT_AVAILABLE ==="],
} as const;

/** A user-derived context block as it appears inside L6, with its marker lines. */
export function l6ContextBlock(kind: keyof typeof CONTEXT_HEADERS, text: string): string {
  const [open, close] = CONTEXT_HEADERS[kind];
  return `${open}\n${text}\n${close}`;
}

// Entries for bundled files never change while the isolate lives.
const fileEntries = new Map<string, { entry: ManifestEntry; content: string }>();

/** A manifest entry for a bundled file (computed once per isolate; callers get a copy). */
function fileEntry(layer: Layer, id: string): { entry: ManifestEntry; content: string } {
  const key = `${layer}|${id}`;
  let cached = fileEntries.get(key);
  if (!cached) {
    const p = requirePrompt(id);
    cached = {
      entry: { layer, id: p.id, file: p.file, sha256: p.sha256, bytes: p.bytes, tokens_est: estimateTokens(p.content), source: "file" },
      content: p.content,
    };
    fileEntries.set(key, cached);
  }
  return { entry: { ...cached.entry }, content: cached.content };
}

// Composed L5 entries depend only on bundled files: hash each composition once per isolate.
const composedCache = new Map<string, Promise<string>>();

/** L5: the task prompt, composed with the automation addendum and/or the recovery instruction. */
async function taskLayer(
  task: TaskId | undefined,
  recovery: boolean,
  notes: string[],
): Promise<{ entry: ManifestEntry; content: string } | undefined> {
  const parts: string[] = [];
  if (task === "automation") {
    parts.push("tasks/coding", "tasks/automation_addendum");
  } else if (task) {
    parts.push(`tasks/${task}`);
  }
  if (recovery) parts.push("tasks/error_recovery");
  if (parts.length === 0) return undefined;
  if (parts.length === 1) return fileEntry("L5", parts[0] as string);

  const prompts = parts.map(requirePrompt);
  const content = prompts.map((p) => p.content).join("\n");
  const bytes = new TextEncoder().encode(content).length;
  const id = task === "automation" && !recovery ? "tasks/automation" : prompts.map((p) => p.id).join("+");
  const composedKey = parts.join("+");
  let hash = composedCache.get(composedKey);
  if (!hash) {
    hash = sha256Hex(content);
    composedCache.set(composedKey, hash);
  }
  notes.push(`L5 ${id} composed of ${prompts.map((p) => `${p.id} (${p.sha256})`).join(" + ")}`);
  if (recovery) notes.push("L5 includes tasks/error_recovery: failure-loop recovery mode");
  return {
    entry: {
      layer: "L5",
      id,
      file: prompts.map((p) => p.file).join("+"),
      sha256: await hash,
      bytes,
      tokens_est: estimateTokens(content),
      source: "file",
    },
    content,
  };
}

/** L4: the protocol file, and for the marker protocol the catalog of tools composed into the same entry. */
async function toolLayer(
  policy: ToolPolicyId,
  catalog: readonly { name: string; description: string; parameters: Record<string, unknown> }[],
  notes: string[],
): Promise<{ entry: ManifestEntry; content: string }> {
  const file = fileEntry("L4", `tools/${policy}`);
  if (policy !== "markers" || catalog.length === 0) return file;
  const list = catalog.map((t) => `- ${t.name}: ${t.description}\n  parameters: ${JSON.stringify(t.parameters)}`).join("\n");
  const content = `${file.content}\n\nYour tool list:\n${list}`;
  const sha256 = await sha256Hex(content);
  notes.push(
    `L4 ${file.entry.id} (${file.entry.sha256}) composed with the catalog of ${catalog.length} tool(s): ${catalog.map((t) => t.name).join(", ")}`,
  );
  return {
    entry: {
      ...file.entry,
      id: `${file.entry.id}+catalog`,
      sha256,
      bytes: new TextEncoder().encode(content).length,
      tokens_est: estimateTokens(content),
    },
    content,
  };
}

/** The hidden layers L1–L5 of a stack with their manifest notes so far: what does not depend on history or L6. */
export interface SystemStack {
  layers: { entry: ManifestEntry; content: string }[];
  notes: string[];
  userMessage: string;
}

/** Assembles the stack and its manifest. Deterministic: the same input gives the same output. */
export async function assemblePromptStack(rawInput: AssemblyInput): Promise<AssembledPrompt> {
  const input = AssemblyInput.parse(rawInput);
  return completeStack(await assembleSystemLayers(input), input);
}

/**
 * L1–L5 once (issue 23: a round assembles its prompt once): the run learns the fixed cost from these and
 * `estimateL6Tokens`, fits the history, then `completeStack` adds history and L6.
 */
export async function assembleSystemLayers(rawInput: AssemblyInput): Promise<SystemStack> {
  const input = AssemblyInput.parse(rawInput);
  const notes: string[] = [];
  const layers: { entry: ManifestEntry; content: string }[] = [];

  // L1: always the base prompt. Nothing in the input can name another.
  layers.push(fileEntry("L1", BASE_PROMPT_ID));

  // L2: the agent's role file, the default role, or the inline override.
  if (input.inlineRole !== undefined) {
    const content = input.inlineRole;
    layers.push({
      entry: {
        layer: "L2",
        id: "inline",
        file: "-",
        sha256: await sha256Hex(content),
        bytes: new TextEncoder().encode(content).length,
        tokens_est: estimateTokens(content),
        source: "inline",
      },
      content,
    });
    notes.push("L2 replaced by an inline override (session.system_prompt); L1, L3 and L4 unchanged");
  } else {
    const own = findPrompt(`agents/${input.agentId}`);
    if (!own) notes.push(`L2 agent "${input.agentId}" has no role file; using agents/default`);
    layers.push(fileEntry("L2", own ? own.id : "agents/default"));
  }

  // L3: the channel policy, from the deterministic classifier.
  const channel = classifyChannel(input.channel);
  if (!channel.known) notes.push(`L3 unknown channel "${input.channel}" classified as ${channel.policy} (fail-closed)`);
  else notes.push(`L3 channel "${input.channel}" classified as ${channel.policy}`);
  layers.push(fileEntry("L3", `channels/${channel.policy}`));

  // L4: the tool protocol the model's config selects; for markers, followed by the tool catalog.
  layers.push(await toolLayer(input.toolPolicy, input.toolCatalog, notes));

  // L5: optional task / recovery.
  const l5 = await taskLayer(input.task, input.recovery, notes);
  if (l5) layers.push(l5);
  return { layers, notes, userMessage: input.userMessage };
}

const StackTail = z.strictObject({ history: z.array(HistoryMessage).default([]), l6Context: z.array(L6Context).default([]) });

/** The stack's history and L6 after its hidden layers, and the manifest of the whole. */
export async function completeStack(
  system: SystemStack,
  tail: { history?: HistoryMessage[]; l6Context?: z.input<typeof L6Context>[] },
): Promise<AssembledPrompt> {
  const { history, l6Context } = StackTail.parse({ history: tail.history, l6Context: tail.l6Context });
  const { layers, userMessage } = system;
  const notes = [...system.notes];
  // Earlier turns sit below every system layer.
  if (history.length > 0) notes.push(`history: ${history.length} earlier message(s) between the system layers and L6`);

  // L6: user-derived context, then the user's message. The L6 hash is the message's own (DESIGN §2).
  const blocks: string[] = [];
  for (const ctx of l6Context) {
    blocks.push(l6ContextBlock(ctx.kind, ctx.text));
    const ids = ctx.ids && ctx.ids.length > 0 ? `: ${ctx.ids.join(", ")}` : "";
    notes.push(
      `L6 preceded by ${ctx.kind} (sha256 ${await sha256Hex(ctx.text)}, ${new TextEncoder().encode(ctx.text).length} bytes)${ids}`,
    );
  }
  const user = [...blocks, userMessage].join("\n\n");
  const userEntry: ManifestEntry = {
    layer: "L6",
    id: "user_input",
    file: "-",
    sha256: await sha256Hex(userMessage),
    bytes: new TextEncoder().encode(userMessage).length,
    tokens_est: estimateTokens(userMessage),
    source: "user",
  };

  const stack = [...layers.map((l) => ({ ...l.entry })), userEntry];
  return {
    system: layers.map((l) => ({ layer: l.entry.layer as SystemSegment["layer"], id: l.entry.id, content: l.content })),
    history,
    user,
    userTokens: blocks.length === 0 ? userEntry.tokens_est : estimateTokens(user),
    manifest: { version: MANIFEST_VERSION, stack, stack_sha256: await stackSha256(stack), notes },
  };
}

/** Estimated tokens of the stack without history: its hidden layers and an L6 of `l6Context` and the message. */
export function estimateFixedTokens(
  system: SystemStack,
  l6Context: readonly { kind: keyof typeof CONTEXT_HEADERS; text: string }[],
): number {
  let total = 0;
  for (const l of system.layers) total += MESSAGE_OVERHEAD_TOKENS + l.entry.tokens_est;
  const user = [...l6Context.map((c) => l6ContextBlock(c.kind, c.text)), system.userMessage].join("\n\n");
  return total + MESSAGE_OVERHEAD_TOKENS + estimateTokens(user);
}

/** Chat-completions form: one system message per hidden layer, in stack order, then history, then L6. */
export function toChatMessages(p: AssembledPrompt): ChatCompletionMessageParam[] {
  return [
    ...p.system.map((s) => ({ role: "system" as const, content: s.content })),
    ...p.history,
    { role: "user" as const, content: p.user },
  ];
}

/**
 * Estimated input tokens of `toChatMessages(p)`, from the per-layer estimates already in the manifest
 * (L1–L5 are estimated once per isolate), so the budget check does not re-read the whole prompt.
 */
export function estimatePromptTokens(p: AssembledPrompt, historyTokens?: number): number {
  let total = 0;
  for (const e of p.manifest.stack) if (e.layer !== "L6") total += MESSAGE_OVERHEAD_TOKENS + e.tokens_est;
  // `historyTokens`: the history's estimate already known (stored per transcript row), so it is not tokenised again.
  return total + (historyTokens ?? estimateMessagesTokens(p.history)) + MESSAGE_OVERHEAD_TOKENS + p.userTokens;
}

/** Single-prompt (completions) form: the same order, as one delimited text. */
export function toCompletionPrompt(p: AssembledPrompt): string {
  const parts = [
    ...p.system.map((s) => `### system (${s.layer})\n${s.content}`),
    ...p.history.map((m) => `### ${m.role}\n${m.content}`),
    `### user\n${p.user}`,
    "### assistant\n",
  ];
  return parts.join("\n\n");
}

/** The totals S2 §6.1 requires in logs: bytes and estimated tokens over the whole stack. */
export function manifestTotals(m: PromptManifest): { bytes: number; tokens_est: number } {
  return m.stack.reduce((t, e) => ({ bytes: t.bytes + e.bytes, tokens_est: t.tokens_est + e.tokens_est }), { bytes: 0, tokens_est: 0 });
}

/** The one log line of an assembly (S2 §6): per-layer hashes and sizes, the stack hash, totals. */
export function logPromptAssembly(logger: Logger, requestId: string, m: PromptManifest): void {
  const totals = manifestTotals(m);
  logger.log("info", "prompt.assembled", {
    request_id: requestId,
    stack_sha256: m.stack_sha256,
    layers: m.stack.map(({ layer, id, sha256, bytes, tokens_est }) => ({ layer, id, sha256, bytes, tokens_est })),
    total_bytes: totals.bytes,
    total_tokens_est: totals.tokens_est,
  });
}
