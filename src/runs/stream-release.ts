/**
 * Guarded token streaming (issue 23, D-054): the text of a run's model calls, released to an API caller that
 * asked to stream it (`stream: true` on /v1/chat/completions, `deltas=true` on the run events stream) as the
 * incremental output guard (src/prompts/stream-guard.ts) lets it go.
 *
 * Released text is ephemeral: it lives in this isolate's memory, per run, only while a caller watches the run
 * (a run nobody streams pays nothing but a string join), and is never stored — the transcript, events, bundles
 * and audit still get the one final answer, released after the run's final commit. The end of a streamed
 * answer (the held words) is therefore taken from that final answer (`streamTail`). A caller that loses the
 * object (eviction) gets the final answer whole, after what it already has. Channels never watch: they stay
 * final-only (S1 §2.4, D-041).
 */
import { disclosureRefusalMessage } from "../prompts/disclosure";
import { StreamGuard } from "../prompts/stream-guard";
import { redactText, secretValuesFromEnv } from "../security/redact";
import { loadLedger } from "../sessions/disclosure-ledger";
import type { RunContext } from "./host";

/** What separates the text of two model calls of one run in a stream (the preamble of a tool round, the answer). */
export const ROUND_SEPARATOR = "\n\n";
/** A run's released text is forgotten this long after a caller last asked for it. */
const FORGET_AFTER_MS = 10 * 60_000;

/** One watched run: what was released, where the current model call's text starts, whether the guard tripped. */
interface Release {
  text: string;
  roundStart: number;
  /** A round began and has not released yet: its first release is preceded by the separator. */
  separate: boolean;
  blocked: boolean;
  wake: () => void;
  touched: number;
}

const releases = new Map<string, Release>();

/** What a streaming caller reads: the text released after its offset, and the run's current state. */
export interface ReleasedSlice<R> {
  /** Released text after the caller's offset. */
  text: string;
  /** Offset (in all released text) where the current model call's text starts. */
  roundStart: number;
  /** The guard tripped: the stream ends with the refusal. */
  blocked: boolean;
  run: R | null;
  /** The last slice of a release stream (D-060): no more follow. */
  end?: boolean;
}

/** Starts (or keeps) watching `runId`; `wake` wakes the run's long polls when text is released. */
function watch(runId: string, wake: () => void, now: number): Release {
  for (const [id, r] of releases) if (now - r.touched > FORGET_AFTER_MS) releases.delete(id);
  let entry = releases.get(runId);
  if (!entry) {
    entry = { text: "", roundStart: 0, separate: false, blocked: false, wake, touched: now };
    releases.set(runId, entry);
  }
  entry.touched = now;
  // The newest watcher's wake: after a crash a new instance of the object watches the same run in this isolate, and
  // waking the old instance's waiters from the new one's I/O context is refused by the runtime.
  entry.wake = wake;
  return entry;
}

/**
 * Long-polls a watched run, inside the object (each frame of `releaseStream`, each `releasedText`): answers when
 * text past `after` is released, the guard trips, the run ends or pauses (`settled`), or after `waitMs`. A settled
 * run is no longer watched.
 */
export async function awaitRelease<R>(
  runId: string,
  after: number,
  waitMs: number,
  o: { wake: () => void; next: (ms: number) => Promise<void>; run: () => Promise<R | null>; settled: (r: R) => boolean },
): Promise<ReleasedSlice<R>> {
  const deadline = Date.now() + Math.min(Math.max(0, waitMs), 60_000);
  for (;;) {
    const entry = watch(runId, o.wake, Date.now());
    const run = await o.run();
    const settled = run === null || o.settled(run);
    if (entry.text.length > after || entry.blocked || settled || Date.now() >= deadline) {
      if (settled) releases.delete(runId);
      return { text: entry.text.slice(after), roundStart: entry.roundStart, blocked: entry.blocked, run };
    }
    await o.next(deadline - Date.now());
  }
}

/** A run's release as a watcher reads it at one moment: all released text, where the current call's starts, the verdict. */
export interface ReleaseState {
  text: string;
  roundStart: number;
  blocked: boolean;
}

/**
 * The release of `runId` now, watched from here on (so the model's text is guarded and released as it streams):
 * for a reader inside the object that is woken by `wake` (the run's waiters) rather than long-polling — a
 * WebSocket that streams the run (src/sessions/socket-deltas.ts).
 */
export function watchRelease(runId: string, wake: () => void): ReleaseState {
  const { text, roundStart, blocked } = watch(runId, wake, Date.now());
  return { text, roundStart, blocked };
}

/** Stops watching `runId` (its reader saw it end). */
export function forgetRelease(runId: string): void {
  releases.delete(runId);
}

/**
 * The hook of one model call (model-call.ts): takes each streamed piece of the model's text. While nobody
 * watches the run it only keeps the text; once someone does, the incremental guard reads it and what it
 * releases is added to the run's released text (secrets redacted, as in the stored answer).
 */
export function streamRelease(ctx: RunContext, runId: string, hidden: readonly string[]): (piece: string) => void {
  let pending = "";
  let guard: StreamGuard | null = null;
  return (piece) => {
    const entry = releases.get(runId);
    if (!entry || entry.blocked) {
      if (!guard) pending += piece;
      return;
    }
    if (!guard) {
      // Issue 33: judged after what the conversation already released (the ledger is read here, saved with the reply).
      guard = new StreamGuard(visibleForm(ctx), hidden, loadLedger(ctx.host.sql, hidden));
      entry.roundStart = entry.text.length;
      entry.separate = entry.text !== "";
      piece = pending + piece;
      pending = "";
    }
    const step = guard.push(piece);
    if (step === null) return;
    if ("blocked" in step) {
      entry.blocked = true;
      ctx.host.logger.log("warn", "prompt.disclosure_refused", { request_id: runId, stage: "stream", signals: [step.blocked.reason] });
    } else {
      if (entry.separate) entry.text += ROUND_SEPARATOR;
      if (entry.separate) entry.roundStart = entry.text.length;
      entry.separate = false;
      entry.text += step.release;
    }
    // This object's own waiters: the entry's may be another instance's (the run resumed after a crash in this isolate).
    if (ctx.host.wake) ctx.host.wake(runId);
    else entry.wake();
  };
}

/** The visible form of raw model text, as the stored answer will have it: secrets redacted (split ones at the start). */
function visibleForm(ctx: RunContext): (raw: string, atStart: boolean) => string {
  const secrets = secretValuesFromEnv(ctx.host.env);
  return (raw, atStart) => {
    const redacted = redactText(raw, secrets);
    return atStart ? (ctx.host.redactSplitReply?.(redacted, false) ?? redacted) : redacted;
  };
}

/**
 * What a stream sends after the released text, once the run has answered `final`: the rest of the final
 * answer when the last model call's released text begins it; the refusal alone when the guard tripped; else
 * (the answer differs: a refusal by the whole-answer guard, an interrupted and repeated call, a pause) the
 * final answer whole, after a separator.
 */
export function streamTail(released: string, roundStart: number, blocked: boolean, final: string): string {
  const lead = released === "" ? "" : ROUND_SEPARATOR;
  if (blocked) return lead + disclosureRefusalMessage();
  const round = released.slice(roundStart);
  if (round !== "" && final.startsWith(round)) return final.slice(round.length);
  return lead + final;
}

/** What a route's stream followed: all released text, where the last model call's text starts, the verdict, the run. */
export interface Followed<R> {
  released: string;
  roundStart: number;
  blocked: boolean;
  run: R | null;
}

/**
 * A route's side of a guarded stream: reads the slices the object releases (`next`: the frames of the one
 * `releaseStream` RPC, D-060, each at most `quietMs` after the previous) and writes each released piece, until the
 * run ends or pauses, the guard trips, the stream ends, `deadline` passes or `keep` answers false (the caller's
 * open-stream slot is gone). `keep` is asked once per `quietMs`; `idle` after every frame without text (a frame comes
 * at least every quiet period the stream was opened with); `heartbeat` is written after `quietMs` without text
 * (proxies drop silent streams).
 */
export async function followRelease<R extends { finished: boolean; paused: boolean }>(
  next: () => Promise<ReleasedSlice<R>>,
  initial: R | null,
  deadline: number,
  quietMs: number,
  io: { write(text: string): Promise<void>; idle?(): Promise<void>; heartbeat(): Promise<void>; keep(): Promise<boolean> },
): Promise<Followed<R>> {
  const f: Followed<R> = { released: "", roundStart: 0, blocked: false, run: initial };
  let keptAt = Date.now();
  let quietSince = Date.now();
  while (f.run && !f.run.finished && !f.run.paused && !f.blocked && Date.now() < deadline) {
    if (Date.now() - keptAt >= quietMs) {
      if (!(await io.keep())) break;
      keptAt = Date.now();
    }
    const slice = await next();
    Object.assign(f, { run: slice.run, roundStart: slice.roundStart, blocked: slice.blocked });
    if (slice.text !== "") {
      f.released += slice.text;
      quietSince = Date.now();
      await io.write(slice.text);
    } else {
      await io.idle?.();
      if (Date.now() - quietSince >= quietMs) {
        quietSince = Date.now();
        await io.heartbeat();
      }
    }
    if (slice.end) break;
  }
  return f;
}
