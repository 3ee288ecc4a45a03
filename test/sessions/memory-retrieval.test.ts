/**
 * Issue 21 §8 "Memory retrieval reaches the model" (S4 §5, DESIGN "Retrieved memory"): a decision a run's
 * NOTES stored is retrieved for a later run of the same chat session, with that run's message as the query.
 * End to end through POST /v1/chat/messages with a scripted provider: the later provider request carries the
 * exact RETRIEVED_MEMORY block with the item ids inside L6 (never above it), the manifest notes it, the
 * run's trace has a `retrieval` entry listing the ids; the block is redacted and bounded.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { sha256Hex } from "../../src/prompts/hash";
import { latestSummary, memoryId, remember, retrieveForTurn } from "../../src/sessions/memory";
import { appendMessage } from "../../src/sessions/transcript";
import { createSql, type Sql } from "../../src/storage/sql";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { type App, appFor, call, registerTestTools, runDetail, waitForRun } from "../support/runs";

beforeAll(() => registerTestTools());

const notes = (patch: object) => `<<<NOTES_JSON>>>${JSON.stringify(patch)}<<<END_NOTES_JSON>>>`;

/** One chat turn in (agent main, `room`, user u1), waited for; returns the run id. */
async function turn(app: App, room: string, message: string): Promise<string> {
  const res = await call(app, "POST", "/v1/chat/messages", { agent_id: "main", room_id: room, user_id: "u1", message });
  expect(res.status).toBe(202);
  const run = await waitForRun(app, res.body.id);
  expect(run.status).toBe("completed");
  return res.body.id as string;
}

/** A scripted provider and an app whose agent `main` has `agent` overrides (e.g. memory bounds). */
async function scripted(replies: string[], agent: Record<string, unknown> = {}) {
  const host = uniqueHost("script");
  await scriptProvider(
    host,
    replies.map((content) => ({ content })),
  );
  return { host, app: appFor(runConfig(host, { agent })) };
}

/** The content of the last message (L6) in the `i`-th provider request `host` received. */
async function lastSent(host: string, i: number): Promise<string> {
  const messages: { content: string }[] = (await bodiesSentTo(host))[i]?.messages ?? [];
  return messages.at(-1)?.content ?? "";
}

/** The retrieval trace entries of a run (admin view). */
async function retrievals(app: App, runId: string): Promise<unknown[]> {
  const detail = await runDetail(app, runId);
  return detail.trace.filter((t: { kind: string }) => t.kind === "retrieval").map((t: { data: unknown }) => t.data);
}

describe("ISSUE21-8 memory retrieval reaches the model", () => {
  it("ISSUE21-8 a decision stored by NOTES is in a later run's provider request: the exact block with its id inside L6, noted in the manifest, traced", async () => {
    const decision = "release the billing service with blue-green deploys";
    const { host, app } = await scripted([`Agreed.\n${notes({ add_decisions: [decision] })}`, "Blue-green, as decided."]);
    const room = `mem-${crypto.randomUUID().slice(0, 8)}`;
    const first = await turn(app, room, "Let us settle how we ship the billing work.");
    const question = "How do we release the billing service?";
    const second = await turn(app, room, question);

    const id = await memoryId("decision", decision);
    // One item in the memory: bm25's idf (and so the score) is 0 for a term every item holds.
    expect(await retrievals(app, second)).toEqual([{ round: 1, ids: [id], scores: [0] }]);
    const score = 0;
    // The first run found nothing (memory was empty): no block, no retrieval trace.
    expect(await retrievals(app, first)).toEqual([]);

    const inner = `- id=${id} score=${score.toFixed(3)}\n  ${decision}`;
    const bodies = await bodiesSentTo(host);
    expect(bodies).toHaveLength(2);
    const messages = bodies[1]?.messages as { role: string; content: string }[];
    expect(messages.at(-1)).toEqual({
      role: "user",
      content: `=== RETRIEVED_MEMORY ===\n${inner}\n=== END_RETRIEVED_MEMORY ===\n\n${question}`,
    });
    // Never above L6: no system layer and no earlier turn holds the block.
    expect(messages.slice(0, -1).filter((m) => m.content.includes("RETRIEVED_MEMORY"))).toEqual([]);
    expect(messages.filter((m) => m.role === "system").length).toBeGreaterThanOrEqual(4);
    expect(JSON.stringify(bodies[0]?.messages)).not.toContain("RETRIEVED_MEMORY");

    const detail = await runDetail(app, second);
    expect(detail.manifests).toHaveLength(1);
    const manifest = detail.manifests[0].manifest;
    expect(manifest.notes).toContain(
      `L6 preceded by retrieved_memory (sha256 ${await sha256Hex(inner)}, ${new TextEncoder().encode(inner).length} bytes): ${id}`,
    );
    expect(manifest.stack.at(-1)).toMatchObject({ layer: "L6", id: "user_input", sha256: await sha256Hex(question) });
  });

  it("ISSUE21-8 retrieved memory passes redaction: a secret in a stored decision never reaches the provider", async () => {
    const secret = env.MOONSHOT_API_KEY as string;
    const decision = `rotate the billing key ${secret} every month`;
    const { host, app } = await scripted([`Noted.\n${notes({ add_decisions: [decision] })}`, "Monthly."]);
    const room = `mem-${crypto.randomUUID().slice(0, 8)}`;
    await turn(app, room, "Remember our key policy.");
    const second = await turn(app, room, "How often do we rotate the billing key?");

    const id = await memoryId("decision", decision);
    const trace = (await retrievals(app, second)) as { ids: string[]; scores: number[] }[];
    expect(trace.map((t) => t.ids)).toEqual([[id]]);
    const bodies = await bodiesSentTo(host);
    const last = await lastSent(host, 1);
    expect(last).toBe(
      `=== RETRIEVED_MEMORY ===\n- id=${id} score=${trace[0]?.scores[0]?.toFixed(3)}\n  rotate the billing key (a credential was removed here by the gateway) every month\n=== END_RETRIEVED_MEMORY ===\n\nHow often do we rotate the billing key?`,
    );
    expect(JSON.stringify(bodies)).not.toContain(secret);
  });

  it("ISSUE21-8 a turn whose message matches the memory gets the block; the next, with no hit, gets no block and no retrieval trace", async () => {
    const decision = "use Postgres for the ledger";
    const { host, app } = await scripted([`Ok.\n${notes({ add_decisions: [decision] })}`, "Postgres.", "Hello."]);
    const room = `mem-${crypto.randomUUID().slice(0, 8)}`;
    await turn(app, room, "Pick a database.");
    const hit = await turn(app, room, "Which database holds the ledger?");
    const miss = await turn(app, room, "Xylophones whistle quietly");
    const id = await memoryId("decision", decision);
    expect(await retrievals(app, hit)).toEqual([{ round: 1, ids: [id], scores: [0] }]);
    expect(await lastSent(host, 1)).toBe(
      `=== RETRIEVED_MEMORY ===\n- id=${id} score=0.000\n  ${decision}\n=== END_RETRIEVED_MEMORY ===\n\nWhich database holds the ledger?`,
    );
    expect(await retrievals(app, miss)).toEqual([]);
    expect(await lastSent(host, 2)).toBe("Xylophones whistle quietly");
    const detail = await runDetail(app, miss);
    expect(detail.manifests[0].manifest.notes.filter((n: string) => n.includes("retrieved_memory"))).toEqual([]);
  });

  it("ISSUE21-8 retrieval is bounded by agents.<id>.memory: top-k items, the size cap, and topK 0 turns it off", async () => {
    const decisions = ["deploy alpha on mondays", "deploy beta on tuesdays", "deploy gamma on wednesdays"];
    // topK 2: the two best of three matching items.
    const k = await scripted([`Ok.\n${notes({ add_decisions: decisions })}`, "Fine."], { memory: { topK: 2 } });
    const roomK = `mem-${crypto.randomUUID().slice(0, 8)}`;
    await turn(k.app, roomK, "Plan the week.");
    const twoRun = await turn(k.app, roomK, "When do we deploy?");
    const two = (await retrievals(k.app, twoRun)) as { ids: string[] }[];
    expect(two).toHaveLength(1);
    expect(two[0]?.ids).toHaveLength(2);
    const allIds = await Promise.all(decisions.map((d) => memoryId("decision", d)));
    expect(two[0]?.ids.every((id) => allIds.includes(id))).toBe(true);

    // maxChars 500: items of ~380 characters each, so only the best one fits.
    const long = ["alpha", "beta", "gamma"].map((w) => `deploy ${w} ${"carefully ".repeat(36)}`.trim());
    const c = await scripted([`Ok.\n${notes({ add_decisions: long })}`, "Fine."], { memory: { topK: 5, maxChars: 500 } });
    const roomC = `mem-${crypto.randomUUID().slice(0, 8)}`;
    await turn(c.app, roomC, "Plan the week.");
    const capRun = await turn(c.app, roomC, "When do we deploy?");
    const capped = (await retrievals(c.app, capRun)) as { ids: string[] }[];
    expect(capped[0]?.ids).toHaveLength(1);
    const block = await lastSent(c.host, 1);
    const innerText = block.slice("=== RETRIEVED_MEMORY ===\n".length, block.indexOf("\n=== END_RETRIEVED_MEMORY ==="));
    expect(innerText.length).toBeLessThanOrEqual(500);
    expect(innerText.split("\n")).toHaveLength(2);

    // topK 0: retrieval off.
    const off = await scripted([`Ok.\n${notes({ add_decisions: decisions })}`, "Fine."], { memory: { topK: 0 } });
    const roomOff = `mem-${crypto.randomUUID().slice(0, 8)}`;
    await turn(off.app, roomOff, "Plan the week.");
    const offRun = await turn(off.app, roomOff, "When do we deploy?");
    expect(await retrievals(off.app, offRun)).toEqual([]);
    expect(await lastSent(off.host, 1)).toBe("When do we deploy?");
  });

  it("ISSUE21-8 the query is bounded: a long message and a long transcript give the same block as a short one", async () => {
    const decision = "deploy the ledger service on fridays";
    const { host, app } = await scripted([`Ok.\n${notes({ add_decisions: [decision] })}`, ...Array.from({ length: 6 }, () => "Sure.")]);
    const room = `mem-${crypto.randomUUID().slice(0, 8)}`;
    await turn(app, room, "Plan the ledger.");
    const short = await turn(app, room, "When do we deploy the ledger?");
    for (let i = 0; i < 4; i++) await turn(app, room, `filler turn ${i} ${"about unrelated gardening topics ".repeat(20)}`);
    // The same question, at the start of a message of ~60 000 characters: only its head is the query.
    const late = await turn(app, room, `When do we deploy the ledger? ${"zebra quokka ".repeat(5000)}`);
    const a = (await retrievals(app, short)) as { ids: string[]; scores: number[] }[];
    const b = (await retrievals(app, late)) as { ids: string[]; scores: number[] }[];
    expect(b.map((t) => t.ids)).toEqual(a.map((t) => t.ids));
    const blockOf = async (i: number) => {
      const last = await lastSent(host, i);
      return last.slice(0, last.indexOf("=== END_RETRIEVED_MEMORY ===") + "=== END_RETRIEVED_MEMORY ===".length);
    };
    expect(await blockOf(6)).toBe(await blockOf(1));
    expect(await blockOf(1)).toBe(
      `=== RETRIEVED_MEMORY ===\n- id=${await memoryId("decision", decision)} score=${a[0]?.scores[0]?.toFixed(3)}\n  ${decision}\n=== END_RETRIEVED_MEMORY ===`,
    );
  });

  it("ISSUE21-8 figure: rows SQLite reads for one retrieval do not grow with the transcript", async () => {
    /** Rows read by one retrieval as the SessionDO makes it: the generation's first seq, its summary, the memory. */
    async function measure(transcriptRows: number, memoryItems: number) {
      const stub = env.SESSIONS.getByName(`agent:main:http:figure-${transcriptRows}-${memoryItems}:dm:u`);
      return runInDurableObject(stub, async (_i: unknown, state: DurableObjectState) => {
        const sql = createSql(state.storage.sql);
        const now = new Date();
        for (let i = 0; i < transcriptRows; i++)
          appendMessage(sql, { session_id: "s1", role: "user", content: `turn ${i} about the deploy` }, now);
        for (let i = 0; i < memoryItems; i++)
          await remember(
            sql,
            { kind: "decision", text: `deploy rule ${i}: ${i % 2 ? "billing" : "ledger"} first`, from_seq: null, to_seq: null },
            now,
          );
        let rowsRead = 0;
        const counting: Sql = {
          ...sql,
          all: (strings, ...values) => {
            const cursor = state.storage.sql.exec(strings.join("?"), ...values);
            const rows = cursor.toArray();
            rowsRead += cursor.rowsRead;
            return rows as never;
          },
          one: (strings, ...values) => counting.all(strings, ...values)[0] as never,
        };
        const first = counting.one<{ seq: number }>`SELECT MIN(seq) AS seq FROM transcript WHERE session_id = ${"s1"}`;
        latestSummary(counting, first?.seq ?? 0);
        const got = retrieveForTurn(counting, "how do we deploy the billing service?", { topK: 5, maxChars: 2000 }, []);
        return { rowsRead, items: got?.ids.length ?? 0, chars: got?.text.length ?? 0 };
      });
    }
    const figures: Record<string, { rowsRead: number; items: number; chars: number }> = {};
    for (const [t, m] of [
      [10, 20],
      [5000, 20],
      [10, 400],
      [5000, 400],
    ] as const)
      figures[`transcript ${t} rows, memory ${m} items`] = await measure(t, m);
    console.log(`ISSUE21-8 retrieval cost: ${JSON.stringify(figures)}`);
    const at = (t: number, m: number) => figures[`transcript ${t} rows, memory ${m} items`];
    expect(at(5000, 20)).toEqual(at(10, 20));
    expect(at(5000, 400)).toEqual(at(10, 400));
    expect(at(10, 400)?.items).toBe(5);
    expect(at(10, 400)?.chars).toBeLessThanOrEqual(2000);
  });
});
