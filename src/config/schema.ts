/**
 * The gateway configuration schema: one Zod schema, strict at every level.
 *
 * Unknown keys are rejected everywhere (fail-closed, S1 §1.2), secrets are
 * refused before the schema runs (see `secrets-guard.ts`), and cross-field
 * rules (default models exist and are enabled) are checked here so that a
 * config that parses is a config the gateway can run. docs/configuration.md
 * documents every key; keep the two in step.
 */
import { z } from "zod";
import { AGENT_ID } from "../sessions/keys";
import { checkPublicHttpsUrl, checkUrl } from "../tools/net-policy";
import { HoneypotConfig } from "./honeypot";

/** Provider ids become env var prefixes (`MOONSHOT_API_KEY`), so they are identifier-shaped. */
export const ProviderId = z
  .string()
  .regex(/^[a-z][a-z0-9_]{0,31}$/, "provider ids are lower-case letters, digits and _ (at most 32), starting with a letter");

/** Model ids as the config names them (they may contain `:` and `/`, e.g. `llama3:8b`). */
export const ModelId = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/, "model ids are 1-128 characters of letters, digits and . _ : / -");

/** Agent ids appear inside session keys, so they follow the session-key grammar. */
/** The agent id of the gateway's own audit stream (config and secret changes); no configured agent may take it. */
export const GATEWAY_AUDIT_AGENT = "gateway";

export const AgentId = z.string().regex(AGENT_ID, "agent ids are lower-case letters, digits, _ and - (at most 64)");

/** `provider:model` or `{ provider, model }` (S1 §1.4). */
export const ModelRefInput = z.union([z.string().min(3), z.strictObject({ provider: z.string().min(1), model: z.string().min(1) })]);
export type ModelRefInput = z.infer<typeof ModelRefInput>;

export const StartupValidationMode = z.enum(["strict", "warn", "off"]);
export type StartupValidationMode = z.infer<typeof StartupValidationMode>;

/** Up to 6 decimals: a price of p USD per million tokens is then an exact integer of pico-USD per token (D-078). */
const Usd = (max: number) =>
  z
    .number()
    .min(0)
    .max(max)
    .refine((v) => Math.abs(v * 1e6 - Math.round(v * 1e6)) < 1e-6, "at most 6 decimal places");

/** Issue 25 §2: what a model costs, in USD per million tokens (D-078). Without it the model's cost is null, not 0. */
export const ModelPricing = z.strictObject({
  /** Prompt tokens not served from the provider's cache. */
  inputPerMillion: Usd(1000),
  outputPerMillion: Usd(1000),
  /** Prompt tokens the provider reports as cached (`prompt_tokens_details.cached_tokens`); the input price when absent. */
  cachedInputPerMillion: Usd(1000).optional(),
});
export type ModelPricing = z.infer<typeof ModelPricing>;

export const ModelConfig = z
  .strictObject({
    contextWindow: z.int().positive().max(10_000_000),
    maxOutputTokens: z.int().positive().max(1_000_000),
    supportsTools: z.boolean(),
    supportsStreaming: z.boolean(),
    enabled: z.boolean().default(true),
    /** The id sent to the provider's API when it differs from the config's model id. */
    apiModelId: z.string().min(1).max(256).optional(),
    /** Issue 25 §2: USD per million tokens; a model without it has cost null (D-078). */
    pricing: ModelPricing.optional(),
  })
  .refine((m) => m.maxOutputTokens < m.contextWindow, {
    message: "maxOutputTokens must be smaller than contextWindow",
    path: ["maxOutputTokens"],
  });
export type ModelConfig = z.infer<typeof ModelConfig>;

export const ProviderConfig = z
  .strictObject({
    kind: z.literal("openai_compatible").default("openai_compatible"),
    enabled: z.boolean().default(true),
    baseUrl: z.url({ protocol: /^https?$/ }),
    startupValidation: StartupValidationMode.default("warn"),
    /** A model server on the operator's own machine or network: no API key needed, context clamp applies. */
    local: z.boolean().default(false),
    models: z.record(ModelId, ModelConfig).refine((m) => Object.keys(m).length > 0, "a provider needs at least one model"),
    defaults: z.strictObject({ model: ModelId }).optional(),
  })
  .superRefine((p, ctx) => {
    if (!p.local && !p.baseUrl.startsWith("https://")) {
      ctx.addIssue({
        code: "custom",
        path: ["baseUrl"],
        message: "remote providers must use https (set local: true for a model server you run yourself)",
      });
    }
    if (p.defaults && !(p.defaults.model in p.models)) {
      ctx.addIssue({ code: "custom", path: ["defaults", "model"], message: `"${p.defaults.model}" is not one of this provider's models` });
    }
  });
export type ProviderConfig = z.infer<typeof ProviderConfig>;

export const SessionLimits = z.strictObject({
  /** User turns kept in a session before the oldest are archived to R2 (S1 §5.3 maxTurns). */
  maxTurns: z.int().min(1).max(100_000).default(500),
  /** Transcript bytes kept in a session before the oldest turns are archived to R2 (S1 §5.3 maxBytes). */
  maxBytes: z
    .int()
    .min(4096)
    .max(512 * 1024 * 1024)
    .default(2 * 1024 * 1024),
});

/** S3 §6 context caps, in characters. */
export const ContextCapsConfig = z.strictObject({
  perMessage: z.int().min(100).max(100_000).default(1400),
  toolSummary: z.int().min(20).max(10_000).default(220),
  toolError: z.int().min(20).max(10_000).default(320),
  toolOutput: z.int().min(20).max(100_000).default(1000),
  total: z.int().min(1000).max(2_000_000).default(12_000),
});

/** Tool names are namespaced lower-case words: `fs.read_text`, `message.send`. */
export const ToolName = z
  .string()
  .regex(/^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/, "tool names are dotted lower-case words, e.g. fs.read_text");

export const AgentToolsConfig = z.strictObject({
  /** Tools this agent may use (by name or alias); anything else is never offered and denied if called. */
  allow: z.array(ToolName).max(64).default([]),
});

export const AgentBudgetConfig = z.strictObject({
  /** Provider tokens (prompt + completion) this agent may use per UTC day; unlimited when absent. */
  tokensPerDay: z.int().positive().max(1_000_000_000_000).optional(),
  /**
   * Provider tokens one caller (src/runs/caller.ts: an API caller, a channel sender, a job) may use of this agent
   * per UTC day, so one caller cannot spend `tokensPerDay` for everyone (issue 20 §4); no per-caller limit when absent.
   */
  tokensPerCallerPerDay: z.int().positive().max(1_000_000_000_000).optional(),
});

/** S4 §5 retrieval: what each model turn may take from the session's memory (inside L6). */
export const AgentMemoryConfig = z.strictObject({
  /** Memory items per model turn at most; 0 turns retrieval off. */
  topK: z.int().min(0).max(20).default(5),
  /** Characters of the RETRIEVED_MEMORY block's items at most (an item is at most ~450). */
  maxChars: z.int().min(500).max(20_000).default(2000),
});

/**
 * Who may decide this agent's approvals from inside a chat (issue 24 §2, D-075): platform user ids per channel.
 * A run from a Telegram or Slack conversation that waits for an approval gets Approve / Deny buttons in its chat
 * only when the channel's list names someone; a press by anyone not on the list changes nothing. Absent (or an
 * empty list): nobody may approve in that chat, and no buttons are offered (operators decide in /admin as before).
 */
export const AgentApproversConfig = z.strictObject({
  telegram: z
    .array(z.string().regex(/^[1-9]\d{0,19}$/, "a Telegram user id as a string of digits (from.id)"))
    .max(100)
    .optional(),
  slack: z
    .array(z.string().regex(/^[UW][A-Z0-9]{2,30}$/, "a Slack user id such as U0123ABCD"))
    .max(100)
    .optional(),
});
export type AgentApproversConfig = z.infer<typeof AgentApproversConfig>;

export const AgentConfig = z.strictObject({
  /** The agent's model; the gateway-wide `models.default` when absent. */
  model: ModelRefInput.optional(),
  description: z.string().max(280).optional(),
  session: SessionLimits.default({ maxTurns: 500, maxBytes: 2 * 1024 * 1024 }),
  /** S3 §6 caps for rebuilding model context from the transcript. */
  context: ContextCapsConfig.default({ perMessage: 1400, toolSummary: 220, toolError: 320, toolOutput: 1000, total: 12_000 }),
  tools: AgentToolsConfig.default({ allow: [] }),
  budget: AgentBudgetConfig.default({}),
  memory: AgentMemoryConfig.default({ topK: 5, maxChars: 2000 }),
  /** Issue 24 §2: chat users who may approve this agent's tool calls with a button (absent: nobody, no buttons). */
  approvers: AgentApproversConfig.optional(),
});
export type AgentConfig = z.infer<typeof AgentConfig>;

export const HttpConfig = z.strictObject({
  /** Largest request body accepted, in bytes; larger bodies get 413 without being read whole. */
  maxBodyBytes: z
    .int()
    .min(1024)
    .max(100 * 1024 * 1024)
    .default(1024 * 1024),
  /** `Idempotency-Key` on POST /v1/runs and /v1/chat/messages: how long a completed request's response is replayed. */
  idempotency: z.strictObject({ retentionSeconds: z.int().min(60).max(604_800).default(86_400) }).default({ retentionSeconds: 86_400 }),
});

/** Gateway tool callbacks from sandboxes (S5 §Gateway Callback Contract). */
export const ToolCallbacksConfig = z.strictObject({
  /** How long a completed call's result is replayed for a repeated `tool_call_id` (S5: 5 minutes). */
  retentionSeconds: z.int().min(10).max(86_400).default(300),
  /** How long a sandbox token minted without `ttl_seconds` stays valid. */
  sandboxTokenTtlSeconds: z.int().min(60).max(604_800).default(3600),
});

const RiskClassName = z.enum(["read_only", "draft_only", "side_effect"]);

/** S1 §3.2 / §3.3 tool policy. */
export const ToolPolicyConfig = z.strictObject({
  /** Recorded with every gate decision. */
  id: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,64}$/, "policy ids are 1-64 letters, digits, . _ -")
    .default("default"),
  /** Risk classes allowed at all (allowlist by risk class). */
  risks: z.array(RiskClassName).default(["read_only", "draft_only", "side_effect"]),
  /** Risk classes that need a human approval (S1 §3.3 Phase 1: side effects). */
  approvalRequired: z.array(RiskClassName).default(["side_effect"]),
  /** Allowlist by channel: tool name → channels it may run on. Tools not listed run on any channel. */
  channels: z.record(ToolName, z.array(z.string().regex(/^[a-z][a-z0-9_-]{0,31}$/)).max(32)).default({}),
  approvals: z
    .strictObject({
      /** How long an approval request waits for a decision before it expires (the call is then denied). */
      ttlSeconds: z
        .int()
        .min(60)
        .max(7 * 24 * 3600)
        .default(3600),
      /** Pending approvals an agent may have; beyond that, new runs of the agent are refused with 429. */
      maxPendingPerAgent: z.int().min(1).max(1000).default(20),
      /** Pending approvals one caller may have on an agent (issue 20 §4); beyond that, that caller alone gets 429. */
      maxPendingPerCaller: z.int().min(1).max(1000).default(5),
    })
    .default({ ttlSeconds: 3600, maxPendingPerAgent: 20, maxPendingPerCaller: 5 }),
  /**
   * S1 §3.3 Phase 2: `message.send` without approval when the message uses an allowlisted template, goes to
   * an allowlisted recipient type, has no links and no attachments, and the hourly rate limits hold.
   * Absent: every send needs approval.
   */
  honeypot: HoneypotConfig.optional(),
  /**
   * S4 §4 global network allowlist for `http.get`: with it, the capability `net` covers only these domains
   * (and their subdomains); `net:<domain>` still overrides. Absent: `net` covers every public host.
   */
  netAllowlist: z
    .array(
      z.string().regex(/^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/, "a lower-case domain name such as example.com"),
    )
    .max(500)
    .optional(),
});

/** S3 §2 failure loop thresholds. */
export const FailureLoopSettings = z.strictObject({
  failuresToRecover: z.int().min(1).max(20).default(2),
  failuresInRecoveryToEscalate: z.int().min(1).max(20).default(3),
  successesToClear: z.int().min(1).max(20).default(2),
});

/** How runs execute (S3 §1, §2; S4 §7). */
export const RunsConfig = z
  .strictObject({
    /** Model calls that return tool calls, at most, per run; one more call would fail the run. */
    maxToolRounds: z.int().min(1).max(64).default(8),
    /** Tool calls of one model turn that run; the rest of the turn's calls are answered with a tool error (issue 20 §3). */
    maxToolCallsPerTurn: z.int().min(1).max(256).default(16),
    /** Tool calls that run over a whole run; calls past it are answered with a tool error (issue 20 §3). */
    maxToolCallsPerRun: z.int().min(1).max(4096).default(64),
    /** Bounds every tool call's `timeout_ms` is clamped to (S3 §1.1; the default is 30000). */
    toolTimeoutMs: z
      .strictObject({ min: z.int().min(100).max(600_000).default(1000), max: z.int().min(100).max(600_000).default(120_000) })
      .default({ min: 1000, max: 120_000 }),
    /** Provider calls per model turn, the first included (429, 5xx, timeouts and dropped connections are retried). */
    providerAttempts: z.int().min(1).max(6).default(3),
    /** How long one provider call may take. */
    providerTimeoutMs: z.int().min(1000).max(600_000).default(60_000),
    failureLoop: FailureLoopSettings.default({ failuresToRecover: 2, failuresInRecoveryToEscalate: 3, successesToClear: 2 }),
  })
  .refine((r) => r.toolTimeoutMs.min <= r.toolTimeoutMs.max, { message: "toolTimeoutMs.min must not exceed max", path: ["toolTimeoutMs"] });

export const LoggingConfig = z.strictObject({
  level: z.enum(["debug", "info", "warn", "error"]).default("info"),
  /**
   * S1 §4.2 / §4.5: message text is never logged — unless this explicit debug switch is on, and then only for
   * runs on a local provider (`local: true`), with secret patterns and (if set) emails and phones redacted.
   */
  debugContent: z
    .strictObject({ enabled: z.boolean().default(false), redactEmails: z.boolean().default(true), redactPhones: z.boolean().default(true) })
    .default({ enabled: false, redactEmails: true, redactPhones: true }),
});

/**
 * An API base URL for a channel platform, or the Standard Webhooks reply URL: a public https URL by the gateway's one
 * outbound check (issue 33, D-088) — the bot token and every reply go there, so no private, loopback, metadata,
 * internal or special-use host, no credentials, the default port. Refused here, where the config is validated,
 * with the key named.
 */
const ChannelApiBase = z
  .url()
  .max(512)
  .superRefine((u, ctx) => {
    const checked = checkPublicHttpsUrl(u);
    if (!checked.ok) ctx.addIssue({ code: "custom", message: checked.problem });
  })
  .transform((u) => u.replace(/\/+$/, ""));

/**
 * Who may talk to the agent through one channel (issue 24 §3, D-074): `open` — any verified sender (the default);
 * `allowlist` — only a sender whose platform user id, or whose chat / channel / room id, is in `allow`; `pairing` —
 * those, plus senders an admin approved through a pairing code (POST /api/admin/channels/pairings/{code}/approve).
 * A message from anyone else is acknowledged to the platform and never becomes a run (src/channels/sender-policy.ts).
 */
export const SenderPolicyConfig = z.strictObject({
  mode: z.enum(["open", "allowlist", "pairing"]).default("open"),
  /** Platform ids as strings: a user id, or a chat (Telegram), channel (Slack, Discord) or room (Standard Webhooks) id. */
  allow: z
    .array(z.string().regex(/^[A-Za-z0-9_.:@-]{1,128}$/, "a platform id as a string: 1-128 letters, digits and _ . : @ -"))
    .max(1000)
    .default([]),
});
export type SenderPolicyConfig = z.infer<typeof SenderPolicyConfig>;
/** Absent: `open`, anyone verified may talk (as before issue 24 §3; a parsed config without it reads as before). */
const senders = () => SenderPolicyConfig.optional();

/**
 * Chat channels (issue 10; S1 §2.4). Secrets are Worker secrets, never config: TELEGRAM_WEBHOOK_SECRET,
 * TELEGRAM_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_BOT_TOKEN, STANDARD_WEBHOOK_SECRET, DISCORD_PUBLIC_KEY,
 * DISCORD_APPLICATION_ID, DISCORD_BOT_TOKEN (only for job reports to a Discord channel, D-076).
 */
export const ChannelsConfig = z.strictObject({
  telegram: z
    .strictObject({
      enabled: z.boolean().default(false),
      apiBaseUrl: ChannelApiBase.default("https://api.telegram.org"),
      senders: senders(),
    })
    .default({ enabled: false, apiBaseUrl: "https://api.telegram.org" }),
  slack: z
    .strictObject({ enabled: z.boolean().default(false), apiBaseUrl: ChannelApiBase.default("https://slack.com/api"), senders: senders() })
    .default({ enabled: false, apiBaseUrl: "https://slack.com/api" }),
  /** Discord's Interactions endpoint (issue 24 §4); follow-ups go to `{apiBaseUrl}/webhooks/{application}/{token}`. */
  discord: z
    .strictObject({
      enabled: z.boolean().default(false),
      apiBaseUrl: ChannelApiBase.default("https://discord.com/api/v10"),
      senders: senders(),
    })
    .default({ enabled: false, apiBaseUrl: "https://discord.com/api/v10" }),
  standard: z
    .strictObject({
      enabled: z.boolean().default(false),
      /** Where replies to Standard Webhooks messages are POSTed (signed the same way); absent = no replies. */
      replyUrl: ChannelApiBase.optional(),
      senders: senders(),
    })
    .default({ enabled: false }),
  /**
   * Rotation overlap (issue 20 §5): when an inbound webhook secret (TELEGRAM_WEBHOOK_SECRET, SLACK_SIGNING_SECRET,
   * STANDARD_WEBHOOK_SECRET, DISCORD_PUBLIC_KEY) is replaced through POST /api/admin/secrets, the value it replaced is still accepted
   * for this many seconds after the replacement. 0: never.
   */
  secretRotationOverlapSeconds: z.int().min(0).max(604_800).default(86_400),
});
export type ChannelsConfig = z.infer<typeof ChannelsConfig>;

/** Delivery of a job run's output to `notify.target` (S3 §4 notify; DESIGN "Scheduler"). */
export const SchedulerNotifyConfig = z.strictObject({
  /** Deliveries per firing, the first included (network errors, timeouts, 408, 429 and 5xx are retried). */
  maxAttempts: z.int().min(1).max(10).default(6),
  /** Wait before the first retry; each next wait is 4× longer, at most one hour. */
  retryBaseMs: z.int().min(100).max(3_600_000).default(30_000),
  /** How long one delivery attempt may take. */
  timeoutMs: z.int().min(1000).max(30_000).default(10_000),
});

export const SchedulerConfig = z.strictObject({
  /** Firings one cron tick claims and dispatches, at most; the rest stay due for the next tick (a tick stays short). */
  maxFiringsPerTick: z.int().min(1).max(1000).default(200),
  /** Firings handed to SessionDOs at the same time during a tick. */
  dispatchConcurrency: z.int().min(1).max(64).default(16),
  notify: SchedulerNotifyConfig.default({ maxAttempts: 6, retryBaseMs: 30_000, timeoutMs: 10_000 }),
});
export type SchedulerConfig = z.infer<typeof SchedulerConfig>;

/**
 * The OpenAI-compatible front door (`POST /v1/chat/completions`, `GET /v1/models`; docs/openai.md). Agents are
 * addressed as `agent:<agent_id>` or by an alias listed here.
 */
export const OpenAICompatConfig = z.strictObject({
  /** Extra model names a client may use, each naming an agent (e.g. `"gpt-4o": "main"` for a client that insists). */
  aliases: z
    .record(
      z
        .string()
        .regex(
          /^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$/,
          "aliases are 1-64 letters, digits and . _ / - (no ':'), starting with a letter or digit",
        ),
      AgentId,
    )
    .default({}),
  /**
   * What a client's `system` (or `developer`) message becomes: `as_user` puts its text in the new user input (L6,
   * labelled as the client's), `refuse` answers 400. Never a hidden layer either way.
   */
  systemMessages: z.enum(["as_user", "refuse"]).default("as_user"),
  /** How long a request is held for its run; longer runs are answered with their run id (fetch it from /v1/runs). */
  waitSeconds: z.number().int().min(1).max(900).default(120),
});

/** Per-caller limits (issue 20 §4): what one API caller may hold at once, so it cannot use it up for the others. */
export const CallerLimitsConfig = z.strictObject({
  /** Event streams one API caller may have open (GET /v1/runs/{id}/events, streamed /v1/chat/completions); more → 429. */
  maxOpenStreamsPerCaller: z.int().min(1).max(1000).default(8),
});

/**
 * Issue 25 §2 budget alerts (D-078): when the usage of an agent, or of a caller (src/runs/caller.ts key, e.g.
 * `api:<caller id>`), reaches a threshold within a UTC day or month, one audit event `usage.alert` and, with
 * `webhook`, one signed webhook — once per alert and period, whichever run crosses it.
 */
export const UsageAlert = z
  .strictObject({
    scope: z.enum(["agent", "caller"]),
    /** The agent id (scope agent) or the caller key (scope caller: `api:<id>`, `job:<id>`, `telegram:<bot>:<user>`, …). */
    id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,199}$/, "an agent id or a caller key (letters, digits, _ . : @ + -)"),
    period: z.enum(["day", "month"]),
    /** Threshold in USD (cost of priced calls); exactly one of costUsd and tokens. */
    costUsd: Usd(1_000_000)
      .refine((v) => v > 0, "must be more than 0")
      .optional(),
    /** Threshold in provider-reported tokens (prompt + completion). */
    tokens: z.int().positive().max(1_000_000_000_000).optional(),
    /** An https URL to POST the alert to, signed like a job's webhook (Standard Webhooks v1 and v1a, D-089). */
    webhook: z
      .url({ protocol: /^https$/ })
      .max(2048)
      .optional(),
  })
  .refine((a) => (a.costUsd === undefined) !== (a.tokens === undefined), { message: "set exactly one of costUsd and tokens" });
export type UsageAlert = z.infer<typeof UsageAlert>;

export const UsageConfig = z.strictObject({
  alerts: z.array(UsageAlert).max(1000).default([]),
});

/** S5 setup sessions (`POST /v1/runs` with `session_type: "setup"`): who may start one. */
export const SetupConfig = z.strictObject({
  /** API caller ids (the `callerId` of `GATEWAY_API_TOKENS`) allowed to start setup sessions; empty: none. */
  allowedCallers: z
    .array(z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, "a caller id: letters, digits, _ . - (at most 64)"))
    .max(256)
    .default([]),
});
export type SetupConfig = z.infer<typeof SetupConfig>;

/** The configuration's keys; `GatewayConfig` adds the rules across them. */
const GatewayConfigObject = z.strictObject({
  http: HttpConfig.default({ maxBodyBytes: 1024 * 1024, idempotency: { retentionSeconds: 86_400 } }),
  models: z.strictObject({
    /** The gateway-wide default model ref; may be omitted when exactly one provider declares `defaults.model`. */
    default: ModelRefInput.optional(),
    providers: z.record(ProviderId, ProviderConfig),
  }),
  agents: z
    .record(
      AgentId.refine(
        (id) => id !== GATEWAY_AUDIT_AGENT,
        `"${GATEWAY_AUDIT_AGENT}" is reserved: the gateway's own audit stream (admin changes) has that id`,
      ),
      AgentConfig,
    )
    .default({}),
  /** Chat channels: Telegram, Slack, Discord, Standard Webhooks (each off unless enabled). */
  channels: ChannelsConfig.default({
    telegram: { enabled: false, apiBaseUrl: "https://api.telegram.org" },
    slack: { enabled: false, apiBaseUrl: "https://slack.com/api" },
    discord: { enabled: false, apiBaseUrl: "https://discord.com/api/v10" },
    standard: { enabled: false },
    secretRotationOverlapSeconds: 86_400,
  }),
  /** The tool policy (S1 §3.2, §3.3): risk classes, channels per tool, approvals. Agents allowlist tools by name. */
  tools: z
    .strictObject({
      policy: ToolPolicyConfig.default({
        id: "default",
        risks: ["read_only", "draft_only", "side_effect"],
        approvalRequired: ["side_effect"],
        channels: {},
        approvals: { ttlSeconds: 3600, maxPendingPerAgent: 20, maxPendingPerCaller: 5 },
      }),
      callbacks: ToolCallbacksConfig.default({ retentionSeconds: 300, sandboxTokenTtlSeconds: 3600 }),
    })
    .default({
      policy: {
        id: "default",
        risks: ["read_only", "draft_only", "side_effect"],
        approvalRequired: ["side_effect"],
        channels: {},
        approvals: { ttlSeconds: 3600, maxPendingPerAgent: 20, maxPendingPerCaller: 5 },
      },
      callbacks: { retentionSeconds: 300, sandboxTokenTtlSeconds: 3600 },
    }),
  runs: RunsConfig.default({
    maxToolRounds: 8,
    maxToolCallsPerTurn: 16,
    maxToolCallsPerRun: 64,
    toolTimeoutMs: { min: 1000, max: 120_000 },
    providerAttempts: 3,
    providerTimeoutMs: 60_000,
    failureLoop: { failuresToRecover: 2, failuresInRecoveryToEscalate: 3, successesToClear: 2 },
  }),
  logging: LoggingConfig.default({ level: "info", debugContent: { enabled: false, redactEmails: true, redactPhones: true } }),
  /** The OpenAI-compatible front door (docs/openai.md). */
  openai: OpenAICompatConfig.default({ aliases: {}, systemMessages: "as_user", waitSeconds: 120 }),
  /** The cron tick and job notifications (S3 §4). Jobs themselves live in D1, managed through /api/admin/jobs. */
  scheduler: SchedulerConfig.default({
    maxFiringsPerTick: 200,
    dispatchConcurrency: 16,
    notify: { maxAttempts: 6, retryBaseMs: 30_000, timeoutMs: 10_000 },
  }),
  limits: CallerLimitsConfig.default({ maxOpenStreamsPerCaller: 8 }),
  /** Who may start S5 setup sessions, whose tools save the agent's service commands (docs/configuration.md). */
  setup: SetupConfig.default({ allowedCallers: [] }),
  /** Issue 25 §2: budget alerts on usage (docs/configuration.md "Usage and cost"). */
  usage: UsageConfig.default({ alerts: [] }),
});

/** The gateway configuration: its keys, and the rules across them (an alert's agent exists; its webhook is allowed). */
export const GatewayConfig = GatewayConfigObject.superRefine((c, ctx) => {
  c.usage.alerts.forEach((a, i) => {
    if (a.scope === "agent" && !Object.hasOwn(c.agents, a.id))
      ctx.addIssue({ code: "custom", path: ["usage", "alerts", i, "id"], message: `unknown agent "${a.id}"` });
    // The outbound rules of job and completion webhooks (checked again at send time): no private or special address.
    const hook = a.webhook === undefined ? null : checkUrl(a.webhook);
    if (hook && !hook.ok)
      ctx.addIssue({
        code: "custom",
        path: ["usage", "alerts", i, "webhook"],
        message: `not an allowed outbound URL (${hook.reason}): no credentials, default port, no private or special-purpose address`,
      });
  });
});
export type GatewayConfig = z.infer<typeof GatewayConfig>;
/** The config as written in the file, before defaults are applied. */
export type GatewayConfigInput = z.input<typeof GatewayConfig>;
