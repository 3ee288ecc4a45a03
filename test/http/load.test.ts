/**
 * Load (issue 12 item 2): N concurrent chat sessions × 5 turns each through POST /v1/chat/messages, against the
 * real app, SessionDOs, D1 and R2, with only the model mocked at the network boundary (test/support/outbound.ts).
 * Each session waits for its run to finish before its next turn; the sessions run side by side.
 *
 * Asserted: zero errors (every HTTP answer 2xx), every transcript exactly complete (the 5 user messages in order,
 * each followed by its own assistant reply, no duplicates — read page by page through next_cursor), and every run
 * completed with continuous events (seq 1..n, run.created first, run.completed last).
 *
 * N comes from the LOAD_SESSIONS binding (vitest.config.ts: process.env.LOAD_SESSIONS, default 20 for CI);
 * `npm run load` runs the full 200 × 5.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { validateRunLog } from "../../src/runs/events";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, type App, appFor, call } from "../support/runs";

const SESSIONS = Math.max(1, Number((env as unknown as { LOAD_SESSIONS?: string }).LOAD_SESSIONS ?? "20") || 20);
const TURNS = 5;
/** Messages per transcript page: small, so every transcript spans several pages. */
const PAGE = 3;

const TERMINAL = new Set(["completed", "failed", "cancelled"]);

interface Failure {
  session: number;
  what: string;
  status: number;
  text: string;
}

/** Polls the run until it ends; a slower poll than waitForRun's, since hundreds of sessions poll at once. */
async function finished(app: App, id: string, errors: Failure[], session: number, timeoutMs = 300_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await call(app, "GET", `/v1/runs/${id}`);
    if (res.status < 200 || res.status > 299) {
      errors.push({ session, what: `GET /v1/runs/${id}`, status: res.status, text: res.text });
      return null;
    }
    if (TERMINAL.has(res.body.status)) return res.body;
    if (Date.now() > deadline) throw new Error(`run ${id} still ${res.body.status} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Every message of a session generation, following next_cursor page by page. */
async function transcript(app: App, sessionId: string, errors: Failure[], session: number) {
  const messages: { seq: number; role: string; content: string; run_id: string | null }[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const q: string = `limit=${PAGE}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
    const res = await call(app, "GET", `/api/admin/chat/sessions/${sessionId}/messages?${q}`, undefined, ADMIN);
    if (res.status !== 200) {
      errors.push({ session, what: "GET messages", status: res.status, text: res.text });
      break;
    }
    messages.push(...res.body.messages);
    cursor = res.body.next_cursor;
    if (++pages > 100) throw new Error("next_cursor never ended");
  } while (cursor);
  return { messages, pages };
}

describe(`load: ${SESSIONS} concurrent sessions × ${TURNS} turns`, () => {
  it("zero errors; every transcript exactly complete and in order; every run completed with continuous events", {
    timeout: 900_000,
  }, async () => {
    const tag = crypto.randomUUID().slice(0, 8);
    const errors: Failure[] = [];
    const started = Date.now();

    const sessions = await Promise.all(
      Array.from({ length: SESSIONS }, async (_, i) => {
        // One scripted model per session: each turn's reply names its session and turn, so a reply landing in the
        // wrong session, twice, or out of order shows in the transcript.
        const host = uniqueHost("script");
        await scriptProvider(
          host,
          Array.from({ length: TURNS }, (_, t) => ({ content: `reply ${i}.${t + 1}` })),
        );
        const app = appFor(runConfig(host, { agent: { tools: { allow: [] } } }));
        const runs: { id: string; run: any }[] = [];
        let sessionId: string | null = null;
        for (let t = 1; t <= TURNS; t++) {
          const res = await call(app, "POST", "/v1/chat/messages", {
            user_id: `user-${i}`,
            room_id: `load-${tag}-${i}`,
            agent_id: "main",
            message: `turn ${i}.${t}`,
          });
          if (res.status < 200 || res.status > 299) {
            errors.push({ session: i, what: `POST turn ${t}`, status: res.status, text: res.text });
            break;
          }
          if (sessionId !== null && res.body.session_id !== sessionId)
            errors.push({ session: i, what: `turn ${t} changed session`, status: res.status, text: res.text });
          sessionId = res.body.session_id;
          runs.push({ id: res.body.id, run: await finished(app, res.body.id, errors, i) });
        }
        return { i, app, sessionId, runs };
      }),
    );
    const runsDone = Date.now();

    let pagesRead = 0;
    for (const s of sessions) {
      expect(s.runs.map((r) => r.run?.status)).toEqual(Array(TURNS).fill("completed"));
      const { messages, pages } = await transcript(s.app, s.sessionId as string, errors, s.i);
      pagesRead += pages;
      // Exactly: user turn t, then its reply, for t = 1..5 — nothing missing, nothing twice, nothing foreign.
      expect(messages.map((m) => [m.role, m.content])).toEqual(
        Array.from({ length: TURNS }, (_, t) => [
          ["user", `turn ${s.i}.${t + 1}`],
          ["assistant", `reply ${s.i}.${t + 1}`],
        ]).flat(),
      );
      expect(messages.map((m) => m.seq)).toEqual(Array.from({ length: 2 * TURNS }, (_, n) => n + 1));
      expect(messages.map((m) => m.run_id)).toEqual(s.runs.flatMap((r) => [r.id, r.id]));
      for (const { id } of s.runs) {
        const res = await call(s.app, "GET", `/api/admin/runs/${id}`, undefined, ADMIN);
        if (res.status !== 200) {
          errors.push({ session: s.i, what: `GET /api/admin/runs/${id}`, status: res.status, text: res.text });
          continue;
        }
        const events = res.body.events as { seq: number; event_type: string }[];
        expect(events.map((e) => e.seq)).toEqual(events.map((_, n) => n + 1));
        expect(events[0]?.event_type).toBe("run.created");
        expect(events.at(-1)?.event_type).toBe("run.completed");
        expect(events.filter((e) => e.event_type === "run.completed")).toHaveLength(1);
        expect(validateRunLog(events as never)).toBeNull();
      }
    }

    expect(errors).toEqual([]);
    console.log(
      `load: ${SESSIONS} sessions × ${TURNS} turns = ${SESSIONS * TURNS} runs in ${runsDone - started} ms ` +
        `(${(((SESSIONS * TURNS) / (runsDone - started)) * 1000).toFixed(1)} runs/s); verified in ${Date.now() - runsDone} ms; ` +
        `${pagesRead} transcript pages; 0 errors`,
    );
  });
});
