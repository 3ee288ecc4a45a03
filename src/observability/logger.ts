/**
 * The gateway's one logger. It takes an event name from a closed set and the
 * typed fields of that event — never free text — so that raw prompts, user
 * bodies and credentials have no way in (S1 §4.2). Lines are JSON on the
 * console (Workers Logs / `wrangler tail`); the R2 log segments are fed from
 * the same events. D-068: the lines of a run an HTTP caller waits for reach the console inside that request's
 * `http.request` line (`run_lines`, src/observability/run-lines.ts); the archive keeps them as lines of their own.
 */

export type LogLevel = "debug" | "info" | "warn" | "error";

/** Every event the gateway logs, with its fields. Adding a log line means adding a type here. */
/**
 * The line of one turn (S1 §4.1, S2 §6.1): hashes, ids, sizes, usage and latency only. The round fields are
 * absent when the run ended before a prompt was assembled or a model called.
 */
/** One tool call's policy decision as logged (S1 §4.1): the tool, channel, risk, policy id and outcome. */
export interface GateLine {
  tool: string;
  channel: string;
  risk: string;
  policy_id: string;
  outcome: string;
}

export interface RunTurnLine {
  run_id: string;
  request_id: string;
  agent_id: string;
  /** S1 §4.1 gate outcomes of the tool calls gated since the run's previous line (D-067): one entry per decision. */
  gates?: GateLine[];
  status?: string;
  code?: string;
  rounds?: number;
  tool_calls?: number;
  round?: number;
  stack_sha256?: string;
  layers?: { layer: string; id: string; sha256: string; bytes: number; tokens_est: number }[];
  total_bytes?: number;
  total_tokens_est?: number;
  provider?: string;
  model?: string;
  estimated_input_tokens?: number;
  /** The model call's outcome, and why it failed; a cancelled call carries what it was charged (issue 33). */
  call?: "ok" | "failed" | "cancelled";
  reason?: string;
  attempts?: number;
  prompt_tokens?: number;
  completion_tokens?: number;
  /** Issue 33: why the provider's usage block was refused (the tokens above are then the gateway's estimates). */
  usage_refused?: string;
  latency_ms?: number;
}

export interface LogEvents {
  /**
   * One per HTTP request, when it completes. On the console, a request that waited for its run and got it back
   * ended or paused carries that run's lines (D-068), exactly as the SessionDO would have printed them; the R2
   * archive's copy never does (the run's lines are archived on their own).
   */
  "http.request": { request_id: string; method: string; route: string; status: number; latency_ms: number; run_lines?: RunLine[] };
  /** A request that ended in an error; `error_message` is redacted before it is written. */
  "http.error": {
    request_id: string;
    code: string;
    status: number;
    error_name?: string;
    error_message?: string;
  };
  /** The provider check that runs before the first request that needs the model (S1 §1.6). */
  "startup.validation": {
    provider: string;
    model: string;
    mode: "strict" | "warn" | "off";
    status: "ok" | "failed" | "skipped";
    reason?: string;
    message?: string;
    latency_ms?: number;
  };
  /** A prompt stack was assembled (S1 §4.1, S2 §6.1): hashes, sizes and ids only — never layer text or user text. */
  "prompt.assembled": {
    request_id: string;
    stack_sha256: string;
    layers: { layer: string; id: string; sha256: string; bytes: number; tokens_est: number }[];
    total_bytes: number;
    total_tokens_est: number;
  };
  /** The disclosure guard refused a request (input) or blocked a reply (output); rule names only. */
  "prompt.disclosure_refused": { request_id: string; stage: "input" | "output" | "tool_args" | "stream"; signals: string[]; tool?: string };
  /** A secret the gateway needs is malformed and was ignored (fail-closed). */
  "auth.config_rejected": { variable: string; problem: string };
  /** An `sgw_` API key was refused (D-077): its key id and why, never the key. The caller only sees one 401. */
  "auth.key_refused": { key_id: string; reason: "unknown" | "secret" | "revoked" | "expired" | "caller_in_env" };
  /** One model call of a run (S1 §4.1): provider/model, token estimate and usage, latency, the stack hash. */
  "model.call": {
    run_id: string;
    provider: string;
    model: string;
    stack_sha256: string;
    estimated_input_tokens: number;
    status: "ok" | "failed";
    reason?: string;
    attempts?: number;
    prompt_tokens?: number;
    completion_tokens?: number;
    latency_ms: number;
  };
  /**
   * Policy decisions a run gathered and had no round or turn line to ride on (S1 §4.1 gate outcome): written when
   * the run pauses for an approval (D-067); otherwise they are in the next `run.round` / `run.turn` line's `gates`.
   */
  "tool.gate": { run_id: string; gates: GateLine[] };
  /** Outbound text a tool rendered (a draft, a sent message), by its SHA-256 only (S1 §4.3). */
  "tool.rendered": { run_id: string; tool: string; tool_call_id: string; ok: boolean; rendered_sha256: string };
  /** Message text, only with `logging.debugContent` on and a local provider (S1 §4.5): already redacted. */
  "debug.content": { run_id: string; round: number; role: "user" | "assistant"; text: string };
  /** Issue 23: a run's one line when it ends, with every S1 §4.1 / S2 §6.1 field of its last model round (turn-line.ts). */
  "run.turn": RunTurnLine;
  /** Issue 23: a model round that led to a tool round, as `run.turn` without the outcome. */
  "run.round": Omit<RunTurnLine, "status" | "code" | "rounds" | "tool_calls">;
  /** A run or tool failed in a way the code did not expect; the error's name only. */
  "run.internal_error": { run_id: string; tool?: string; error_name: string };
  /** The cron tick ran. */
  /** One per cron tick: what it found, claimed, took over and handed to SessionDOs. */
  "scheduler.tick": {
    scheduled_time: string;
    cron: string;
    due: number;
    claimed: number;
    recovered: number;
    dispatched: number;
    skipped: number;
    failed: number;
    deferred: number;
    /** Refused channel senders' rows pruned past their retention (D-083). */
    senders_pruned: number;
    duration_ms: number;
  };
  /** The tick's prune of refused channel senders failed (D-083): the error's name; the next tick tries again. */
  "scheduler.senders_prune": { error_name: string };
  "scheduler.buttons_prune": { error_name: string };
  /** An admin stored, replaced or deleted a secret (its name only, never the value). */
  "admin.secret": { name: string; action: "created" | "replaced" | "deleted" };
  /** Issue 21 §2: key names only, never a value. */
  "admin.env_request": { request_id: string; action: "fulfilled"; keys: string[] };
  /** An admin posted a configuration version (its hash, never its content). */
  "admin.config": { version: number; sha256: string };
  /** The newest posted config version is not in force (superseded by a deploy, or no longer valid), or D1 was unreadable. */
  "config.version_unused": { version: number; reason: string };
  /** Stored secrets could not be read: the Worker's own secrets serve meanwhile. */
  "secrets.overlay_unavailable": { error_message: string };
  /** One per chat-channel message accepted (a duplicate delivery is the same run). Never the text. */
  "channel.message": { channel: string; agent_id: string; run_id: string; duplicate: boolean };
  /** One per chat-channel message its sender policy refused (issue 24 §3): no run. Never the text or the sender's id. */
  "channel.sender.refused": { channel: string; agent_id: string; mode: string; answered: boolean };
  /**
   * One per press of an approval button in a chat (issue 24 §2): `outcome` is `decided`, `refused` (with the
   * reason's first words: `not_approver`, `invalid`, `used`, `expired`, `decided`, `error`) or `duplicate`. Never a token.
   */
  "approval.chat.press": { channel: string; agent_id: string; outcome: string; reason?: string; approval_id?: string };
  /** The chat could not be told a press's outcome (the decision stands): the platform's error, never a token. */
  "approval.chat.answer_failed": { channel: string; error: string };
  /** One per gateway tool callback answered (S5): never its arguments or result. */
  "tool.callback": { session_id: string; tool: string; tool_call_id: string; success: boolean; replayed: boolean };
  /** One per firing handed over (or not): never the job's message. */
  "scheduler.firing": {
    job_id: string;
    scheduled_for: string;
    outcome: "dispatched" | "skipped" | "failed" | "deferred";
    run_id?: string;
    missed?: number;
    error_name?: string;
  };
}

/** A line as the logger writes it: its time, level and event, then the event's fields. */
export type LogLine<E extends keyof LogEvents = keyof LogEvents> = { ts: string; level: LogLevel; event: E } & LogEvents[E];

/** The events of a run's own lines, the ones a waiting request carries (D-068). */
export type RunLineEvent = "run.round" | "run.turn" | "tool.gate";
/** One of a run's own lines, as written. */
export type RunLine = { [E in RunLineEvent]: LogLine<E> }[RunLineEvent];

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Whether `level` is at or above `minLevel`. */
export function atLeast(level: LogLevel, minLevel: LogLevel): boolean {
  return LEVELS[level] >= LEVELS[minLevel];
}

/** The highest of `levels`, at least `floor`. */
export function highestLevel(levels: Iterable<LogLevel>, floor: LogLevel = "info"): LogLevel {
  let top = floor;
  for (const level of levels) if (LEVELS[level] > LEVELS[top]) top = level;
  return top;
}

/** The line of `event` with `fields`, stamped now (what `Logger.log` writes, as an object). */
export function logLine<E extends keyof LogEvents>(level: LogLevel, event: E, fields: LogEvents[E]): LogLine<E> {
  return { ts: new Date().toISOString(), level, event, ...fields };
}

/** Where log lines go; the console by default, a capture in tests. */
export type LogSink = (line: string, level: LogLevel) => void;

/** JSON lines to the console (Workers Logs). */
export const consoleSink: LogSink = (line, level) => {
  if (level === "error") console.error(line);
  else if (level === "warn") console.warn(line);
  else console.log(line);
};

export interface Logger {
  /** Lines below this level are not written. */
  readonly minLevel: LogLevel;
  log<E extends keyof LogEvents>(level: LogLevel, event: E, fields: LogEvents[E]): void;
}

/** A logger writing JSON lines at or above `minLevel`. */
export function createLogger(minLevel: LogLevel = "info", sink: LogSink = consoleSink): Logger {
  return {
    minLevel,
    log(level, event, fields) {
      if (LEVELS[level] < LEVELS[minLevel]) return;
      sink(JSON.stringify(logLine(level, event, fields)), level);
    },
  };
}
