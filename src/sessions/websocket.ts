/**
 * The WebSocket conversation route's half inside the session's Durable Object (issue 23, docs/decisions.md D-053).
 *
 * The Worker (src/http/v1/socket.ts) authenticates the upgrade, resolves the caller's own session key exactly as
 * `POST /v1/chat/messages` does, takes an open-stream slot for the socket, and forwards the upgrade here with that
 * grant. The object accepts the socket through the hibernatable API (`ctx.acceptWebSocket`, as cloudflare/agents
 * and partyserver do) and keeps the grant in the socket's attachment, so a socket survives the object hibernating:
 * nothing about it lives only in memory.
 *
 * Each `message` frame is a turn submitted through src/runs/submit.ts, like every other door's — the configuration
 * in force, the run spec and prompt stack, the per-caller approval backlog, budgets, audit — with the client's
 * message id as the dispatch key (a resent id re-attaches to its run). The socket then follows the run: the events
 * so far go out at once, and each later event is pushed when the run engine writes it (`onRunEvent`, called from
 * the run waiters), after the write's transaction, so a frame never shows an event that was rolled back; the
 * object's output gate holds the frame until the write is durable. The runs a socket follows, and the last seq it
 * was sent of each, are in its attachment too, so events written after a hibernation still reach it. After the
 * terminal event comes the run itself (`run` frame, the shape of `GET /v1/runs/{run_id}`, with the reply).
 * A message sent with `"stream": true` also gets the answer's text in `delta` frames as the output guard releases
 * it (src/sessions/socket-deltas.ts).
 *
 * Issue 33 (D-086): a socket opened with an API key record is the key's, frame by frame — each message frame counts
 * against the key's requests per minute and is held to its daily tokens, as in force now (src/keys/limits.ts); the key
 * is checked before each frame and each push (src/keys/standing.ts, the isolate's cached record), and a key that no
 * longer stands closes the socket. The socket's open-stream slot is kept by the object's alarm (`upkeep`), however
 * long the socket idles, and given back when it closes.
 */
import { bundledConfig } from "../config/load";
import type { GatewayConfig } from "../config/schema";
import { configInForce } from "../config/versions";
import { GatewayError } from "../errors";
import { type AcquireResult, STREAM_LEASE_RENEW_MS, STREAM_LEASE_TTL_MS } from "../idempotency/stream-leases";
import { keyRequestRefusal } from "../keys/limits";
import { checkKey, keyChecks } from "../keys/standing";
import type { KeyLimits } from "../keys/store";
import type { Admission } from "../runs/backlog";
import { requestCallerKey } from "../runs/caller";
import { eventForApiCaller, TERMINAL } from "../runs/events";
import { getRun, isTerminal, listEvents, type RunRow } from "../runs/store";
import { runViewEnded, type SubmitContext, submitTurn } from "../runs/submit";
import { type AlarmCapability, alarmBy } from "./capabilities";
import type { SessionContext } from "./context";
import { formatSessionKey, parseSessionKey, SESSION_ID, type SessionKey } from "./keys";
import { runRecordOf } from "./run-queries";
import type { SessionDO } from "./SessionDO";
import { closingDelta, newSocketStream, releasedSince, type SocketStream } from "./socket-deltas";
import { errorFrame, parseClientFrame, type SocketMessageFrame, type SocketServerFrame } from "./socket-frames";

/** The header the Worker puts its grant in when it forwards an upgrade; the object is reachable only through it. */
export const SOCKET_GRANT_HEADER = "x-sophie-socket-grant";

/** Admissions kept per object for `#slotBack` (a run whose slot is never given back is only counted until the next read). */
const MAX_ADMISSIONS = 256;

/** At most this many runs followed per socket at once (they live in the attachment, at most 2,048 bytes). */
export const MAX_FOLLOWED_RUNS = 4;

/** What the Worker checked at the upgrade: who the caller is, the conversation, and the open-stream slot it holds. */
export interface SocketGrant {
  callerId: string;
  agentId: string;
  /** The conversation's session key, `agent:{agent}:http:{caller}~{room}:dm:{user}`: this object's own. */
  sessionKey: string;
  /** The caller's open-stream slot (src/http/middleware/open-streams.ts) and the object that counts it. */
  leaseId: string;
  leaseObject: string;
  /** Issue 25 §1: the API key record the socket was opened with (its id and secret fingerprint; its limits are read per frame). */
  key?: SocketKey;
}

/** A socket's key record: enough to ask whether it still stands (src/keys/standing.ts). */
interface SocketKey {
  keyId: string;
  secretTag: string;
}

/** A run the socket follows: its id, the client message id that queued it, the last seq sent, its text stream if asked. */
interface Followed {
  run: string;
  id: string;
  after: number;
  stream?: SocketStream;
}

/**
 * The grant, the runs followed, when the socket's open-stream lease was last renewed (absent: due now), and when
 * its key was last checked by the upkeep (absent: when the socket opened, as the Worker had just checked it).
 */
type Attachment = SocketGrant & { follows: Followed[]; renewedAt?: number; keyCheckedAt?: number };

/** The object's methods a socket turn uses: the same ones every other door reaches over RPC. */
export type SocketTurnTarget = Pick<SessionDO, "enqueueMessage" | "newSession" | "resumeSession">;

/** The sockets of one session object: accepting them, their frames, and pushing their runs' events. */
export class SessionSockets {
  readonly #cx: SessionContext;
  readonly #target: SocketTurnTarget;
  /** Runs with an event written in this tick, pushed once the write's transaction is over. */
  readonly #due = new Set<string>();
  /**
   * The backlog admissions of the runs this instance's sockets queued, given back when the run's final view goes out
   * (D-069, as the HTTP doors do). Memory only: a hibernation forgets them with the isolate's backlog copies.
   */
  readonly #admissions = new Map<string, Admission>();
  /** Wakes whoever waits on a run (its long polls, and through them this object's push): released text is due. */
  readonly #wake: (runId: string) => void;

  constructor(cx: SessionContext, target: SocketTurnTarget, wake: (runId: string) => void) {
    this.#cx = cx;
    this.#target = target;
    this.#wake = wake;
  }

  /** Accepts a forwarded upgrade as a hibernatable socket carrying its grant; 400 for anything else. */
  async accept(request: Request): Promise<Response> {
    const grant = parseGrant(request.headers.get(SOCKET_GRANT_HEADER));
    if (!grant || request.headers.get("Upgrade")?.toLowerCase() !== "websocket")
      return new Response("not a socket upgrade", { status: 400 });
    const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
    this.#cx.state.acceptWebSocket(server, [`caller:${grant.callerId}`]);
    const now = Date.now(); // the Worker just took the lease
    server.serializeAttachment({ ...grant, follows: [], renewedAt: now, keyCheckedAt: now } satisfies Attachment);
    // An idle socket sends nothing that would renew its slot or check its key: the alarm does (D-086).
    await alarmBy(this.#cx.storage, now + (grant.key ? Math.min(STREAM_LEASE_RENEW_MS, keyChecks.idleMs) : STREAM_LEASE_RENEW_MS));
    return new Response(null, { status: 101, webSocket: client });
  }

  /** The sockets' share of the object's alarm (D-086): due at the earliest renewal of an open socket's slot. */
  upkeep(): AlarmCapability {
    return { name: "socket-upkeep", nextAlarmAt: () => this.#nextUpkeepAt(), onAlarm: (now) => this.#upkeep(now) };
  }

  /** One frame from a socket: a turn, answered with frames; a bad frame gets an error frame and the socket stays open. */
  async message(ws: WebSocket, data: string | ArrayBuffer): Promise<void> {
    const parsed = parseClientFrame(data);
    if (!parsed.ok) return send(ws, errorFrame(parsed.error, parsed.id));
    try {
      await this.#turn(ws, parsed.frame);
    } catch (err) {
      const error = err instanceof GatewayError ? err : new GatewayError("internal.error", "internal error");
      send(ws, errorFrame(error, parsed.frame.id));
    }
  }

  /** The socket closed or failed: give its open-stream slot back. */
  async closed(ws: WebSocket): Promise<void> {
    const att = attachmentOf(ws);
    if (!att) return;
    try {
      await this.#cx.env.IDEMPOTENCY.getByName(att.leaseObject).releaseStream(att.leaseId);
    } catch {
      // The slot lapses by itself after STREAM_LEASE_TTL_MS.
    }
  }

  /** A run wrote an event (inside its transaction): push it to the sockets following that run once the write is done. */
  onRunEvent(runId: string): void {
    if (this.#due.has(runId)) return;
    this.#due.add(runId);
    queueMicrotask(() => {
      this.#due.delete(runId);
      for (const ws of this.#cx.state.getWebSockets()) void this.#deliver(ws, runId);
    });
  }

  /**
   * Pushes `runId` to `ws` if it follows the run; on a key's socket only once the key is confirmed (D-086) — a key
   * that no longer stands closes the socket instead, and one that cannot be checked now waits for the next push or
   * the upkeep. Without a key nothing is awaited: the push is synchronous, as before.
   */
  async #deliver(ws: WebSocket, runId: string): Promise<void> {
    const att = attachmentOf(ws);
    if (!att?.follows.some((f) => f.run === runId)) return;
    if (att.key && !(await this.#keyHolds(ws, att.key, att.agentId))) return;
    this.#push(ws, runId);
  }

  /** Whether the socket's key still stands; when it never will again, the socket is closed with the reason. */
  async #keyHolds(ws: WebSocket, key: SocketKey, agentId: string): Promise<boolean> {
    const check = await checkKey(this.#cx.env.DB, key, agentId, "socket");
    if (!check.ok && check.final) await this.#shut(ws, check.error);
    return check.ok;
  }

  /**
   * The key's limits in force for a frame, once the frame is counted as one of the key's requests (D-086: a socket's
   * frames are its requests, the upgrade only the first); null when the key no longer stands (the socket is closed).
   */
  async #keyFrame(ws: WebSocket, key: SocketKey, agentId: string, id: string): Promise<KeyLimits | null> {
    const check = await checkKey(this.#cx.env.DB, key, agentId, "socket");
    if (!check.ok && check.final) {
      await this.#shut(ws, check.error, id);
      return null;
    }
    if (!check.ok) throw check.error;
    const refusal = await keyRequestRefusal(this.#cx.env, key.keyId, check.limits);
    if (refusal) throw refusal;
    return check.limits;
  }

  /** Ends a socket that may not go on: the error frame, a policy-violation close, and its slot back at once. */
  async #shut(ws: WebSocket, error: GatewayError, id?: string): Promise<void> {
    send(ws, errorFrame(error, id));
    try {
      ws.close(1008, error.code);
    } catch {
      // already closing
    }
    await this.closed(ws);
  }

  /**
   * When the upkeep is next due: the earliest renewal of an open socket's slot, or check of a key's socket — an idle
   * one too, so a key revoked, rotated or expired meanwhile closes it within `keyChecks.idleMs` (null: none open).
   */
  #nextUpkeepAt(): number | null {
    const due = openSockets(this.#cx.state).map(({ att }) => {
      const renew = (att.renewedAt ?? 0) + STREAM_LEASE_RENEW_MS;
      return att.key ? Math.min(renew, (att.keyCheckedAt ?? att.renewedAt ?? 0) + keyChecks.idleMs) : renew;
    });
    return due.length > 0 ? Math.min(...due) : null;
  }

  /**
   * For each open socket: its key checked (closed if it no longer stands), its slot renewed when due (closed if the
   * caller is at its cap meanwhile; kept if the caller's object cannot be reached, as the lease still counts), and the
   * runs it follows caught up (a push held back by a key that could not be checked).
   */
  async #upkeep(now: number): Promise<void> {
    const open = openSockets(this.#cx.state);
    if (open.length === 0) return;
    const max = (await configForTurn(this.#cx.env)).limits.maxOpenStreamsPerCaller;
    for (const { ws, att } of open) {
      const holds = att.key ? await this.#keyHolds(ws, att.key, att.agentId) : true;
      if (ws.readyState !== WebSocket.READY_STATE_OPEN) continue; // closed: its key no longer stands
      if (att.key) {
        const current = attachmentOf(ws); // read again: pushes may have moved it on while the key was checked
        if (current) ws.serializeAttachment({ ...current, keyCheckedAt: now } satisfies Attachment);
      }
      // Renewed even while the key cannot be checked: the socket is open, so it counts.
      const lost = await this.#renewLease(ws, att, max, now);
      if (lost?.code === "rate.limited") {
        await this.#shut(ws, lost);
        continue;
      }
      if (holds) for (const f of att.follows) this.#push(ws, f.run);
    }
  }

  async #turn(ws: WebSocket, frame: SocketMessageFrame): Promise<void> {
    const att = attachmentOf(ws);
    if (!att) throw new GatewayError("internal.error", "this socket has no grant; reconnect");
    const config = await configForTurn(this.#cx.env);
    if (!Object.hasOwn(config.agents, att.agentId)) throw new GatewayError("resource.not_found", `unknown agent "${att.agentId}"`);
    const limits = att.key ? await this.#keyFrame(ws, att.key, att.agentId, frame.id) : {};
    if (limits === null) return; // the key no longer stands: the socket is closed
    const lease = await this.#renewLease(ws, att, config.limits.maxOpenStreamsPerCaller, Date.now());
    if (lease) throw lease;
    const key = ownKey(att);
    const identity = { sessionKey: att.sessionKey, agentId: att.agentId };
    const command = frame.text.trim();
    if (command === "/new" || command === "/resume" || command.startsWith("/resume ")) return this.#command(ws, frame, identity, command);
    if (att.follows.length >= MAX_FOLLOWED_RUNS && !att.follows.some((f) => f.id === frame.id))
      throw new GatewayError("rate.limited", `this socket already follows ${MAX_FOLLOWED_RUNS} unfinished runs; wait for one to end`, {
        retryAfterSeconds: 5,
      });
    const { queued, admission } = await submitTurn(this.#submitContext(config), {
      agentId: att.agentId,
      session: key,
      message: frame.text,
      source: "websocket",
      channel: "http",
      callerId: att.callerId,
      refuseWhenBacklogged: { callerKey: requestCallerKey(att.callerId, att.agentId) },
      // The key's daily tokens as in force now, not as at the upgrade (a budget set since holds too).
      ...(att.key && limits.tokensPerDay !== undefined ? { keyBudget: { keyId: att.key.keyId, tokensPerDay: limits.tokensPerDay } } : {}),
      // Scoped to this conversation's object, like an Idempotency-Key's dispatch key, under a prefix of its own.
      dispatchKey: `ws:${frame.id}`,
    });
    if (admission && !queued.duplicate) {
      // The oldest goes first: a run whose socket closed before it ended never gives its entry back.
      if (this.#admissions.size >= MAX_ADMISSIONS) this.#admissions.delete(this.#admissions.keys().next().value as string);
      this.#admissions.set(queued.runId, admission);
    }
    send(ws, { type: "accepted", id: frame.id, run_id: queued.runId, session_id: queued.sessionId, duplicate: queued.duplicate === true });
    this.#follow(ws, { run: queued.runId, id: frame.id, after: 0, ...(frame.stream ? { stream: newSocketStream() } : {}) });
  }

  /** `/new` and `/resume <session_id>`, as `POST /v1/chat/messages` answers them. */
  async #command(
    ws: WebSocket,
    frame: SocketMessageFrame,
    identity: { sessionKey: string; agentId: string },
    command: string,
  ): Promise<void> {
    if (command === "/new") {
      const r = await this.#target.newSession(identity);
      if (!r.ok) throw archiveFailed();
      const response = `Started a new session. The previous one (${r.previousSessionId}) is archived; /resume ${r.previousSessionId} brings it back.`;
      return send(ws, { type: "response", id: frame.id, response, session_id: r.sessionId });
    }
    const target = command.slice("/resume".length).trim();
    if (!SESSION_ID.test(target)) throw new GatewayError("invalid.request", "usage: /resume <session_id>");
    const r = await this.#target.resumeSession(identity, target);
    if (!r.ok && r.reason === "not_found") throw new GatewayError("resource.not_found", `no session ${target} in this conversation`);
    if (!r.ok) throw archiveFailed();
    send(ws, { type: "response", id: frame.id, response: `Resumed session ${r.sessionId}.`, session_id: r.sessionId });
  }

  /**
   * The turn is submitted through src/runs/submit.ts like every door's; its session is always this object (the
   * grant's key is the one the Worker routed the upgrade by), so the one RPC is a call on this object itself.
   */
  #submitContext(config: GatewayConfig): SubmitContext {
    const target = this.#target;
    const self = { getByName: () => target } as unknown as SubmitContext["env"]["SESSIONS"];
    return { env: { SESSIONS: self, DB: this.#cx.env.DB }, config };
  }

  /** The run's backlog slot back in this isolate's copy, once, if it ended without an approval pending (D-069). */
  #slotBack(runId: string, view: { status: string; tool_calls: number }): void {
    const admission = this.#admissions.get(runId);
    if (!admission) return;
    this.#admissions.delete(runId);
    runViewEnded(admission, view);
  }

  /** Starts following `run` on `ws` (again, for a resent id: from the start) and sends what it has written so far. */
  #follow(ws: WebSocket, followed: Followed): void {
    const att = attachmentOf(ws);
    if (!att) return;
    att.follows = [...att.follows.filter((f) => f.run !== followed.run), followed];
    ws.serializeAttachment(att);
    this.#push(ws, followed.run);
  }

  /** Sends `ws` the events of `runId` it has not had yet; stops following the run once its terminal event is out. */
  #push(ws: WebSocket, runId: string): void {
    const att = attachmentOf(ws);
    const followed = att?.follows.find((f) => f.run === runId);
    if (!att || !followed) return;
    // Every run of this object is its session's agent's: the socket's grant names it, so the run's row is read only
    // once it has ended.
    let terminal = false;
    let run: RunRow | undefined;
    const wake = () => this.#wake(runId);
    if (followed.stream) this.#delta(ws, followed, releasedSince(runId, followed.stream, wake));
    for (;;) {
      const events = listEvents(this.#cx.sql, { id: runId, agent_id: att.agentId }, followed.after, 500);
      for (const e of events) {
        terminal = TERMINAL.has(e.event_type);
        if (terminal) run = getRun(this.#cx.sql, runId);
        // The held last words go right before the terminal event, from the final answer (none for a failed run).
        if (terminal && followed.stream)
          this.#delta(ws, followed, closingDelta(runId, followed.stream, run?.status === "completed" ? run.output : null, wake));
        send(ws, { type: "event", id: followed.id, event: eventForApiCaller(e) });
        followed.after = e.seq;
      }
      if (events.length < 500) break;
    }
    // Statuses and events are written in the same transaction, so once the terminal event is out the run has ended:
    // the run itself closes the turn, as GET /v1/runs/{run_id} shows it (its output is the assistant's reply).
    if (terminal && run && isTerminal(run.status)) {
      att.follows = att.follows.filter((f) => f !== followed);
      const view = runRecordOf(this.#cx.sql, run).view;
      this.#slotBack(runId, view);
      send(ws, { type: "run", id: followed.id, run: view });
    }
    ws.serializeAttachment(att);
  }

  /** One `delta` frame of released text (none when nothing new was released). */
  #delta(ws: WebSocket, followed: Followed, text: string): void {
    if (text === "" || !followed.stream) return;
    send(ws, { type: "delta", id: followed.id, run_id: followed.run, offset: followed.stream.sent - text.length, text });
  }

  /**
   * Renews the socket's open-stream slot when due, or takes it again if it lapsed: null when the slot is held,
   * `rate.limited` when the caller is at its cap meanwhile, a 503 when the caller's object cannot be reached.
   */
  async #renewLease(ws: WebSocket, att: Attachment, max: number, now: number): Promise<GatewayError | null> {
    if (now - (att.renewedAt ?? 0) < STREAM_LEASE_RENEW_MS) return null;
    let taken: AcquireResult;
    try {
      taken = await this.#cx.env.IDEMPOTENCY.getByName(att.leaseObject).acquireStream(att.leaseId, now, max, STREAM_LEASE_TTL_MS);
    } catch {
      return new GatewayError("internal.error", "could not check the open-stream limit; try again", { status: 503 });
    }
    if (!taken.ok)
      return new GatewayError("rate.limited", `this caller already has ${taken.open} event streams open (limit ${max}); close one first`, {
        retryAfterSeconds: 5,
      });
    const current = attachmentOf(ws); // read again: pushes may have moved it on while the lease was asked for
    if (current) ws.serializeAttachment({ ...current, renewedAt: now } satisfies Attachment);
    return null;
  }
}

/** The configuration in force, read as the Worker reads it (an admin-posted version, else the bundled file). */
async function configForTurn(env: Env): Promise<GatewayConfig> {
  try {
    return (await configInForce(env.DB)).config;
  } catch {
    return bundledConfig(); // D1 unreadable: the bundled file serves meanwhile, as in the Worker
  }
}

function ownKey(att: Attachment): SessionKey {
  const parsed = parseSessionKey(att.sessionKey);
  if (!parsed.ok || formatSessionKey(parsed.key) !== att.sessionKey)
    throw new GatewayError("internal.error", "this socket's grant is unreadable; reconnect");
  return parsed.key;
}

function parseGrant(header: string | null): SocketGrant | null {
  if (!header) return null;
  try {
    const g = JSON.parse(header) as Partial<SocketGrant>;
    const fields = [g.callerId, g.agentId, g.sessionKey, g.leaseId, g.leaseObject];
    return fields.every((f) => typeof f === "string" && f.length > 0) ? (g as SocketGrant) : null;
  } catch {
    return null;
  }
}

/** The object's open sockets with their attachments (one closing or closed is not counted). */
function openSockets(state: DurableObjectState): { ws: WebSocket; att: Attachment }[] {
  return state.getWebSockets().flatMap((ws) => {
    const att = attachmentOf(ws);
    return att && ws.readyState === WebSocket.READY_STATE_OPEN ? [{ ws, att }] : [];
  });
}

function attachmentOf(ws: WebSocket): Attachment | null {
  const att = ws.deserializeAttachment() as Attachment | null;
  return att && Array.isArray(att.follows) ? att : null;
}

/** Sends one frame; a socket that closed meanwhile just misses it (its client resends the id to catch up). */
function send(ws: WebSocket, frame: SocketServerFrame): void {
  try {
    ws.send(JSON.stringify(frame));
  } catch {
    // closed
  }
}

function archiveFailed(): GatewayError {
  return new GatewayError("internal.error", "could not archive the current session, so nothing was changed; try again", { status: 503 });
}
