/**
 * Issue 23 "no repeated work per turn" (D-066): who the session is — its key, agent, current generation and S5
 * type — is read from `session_state` once per object and kept, instead of about a dozen times per turn. The
 * memo must never hold what SQLite does not: a row written in a transaction that rolls back is not kept, and a
 * generation change is seen at once.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { insertSession, readSession, readSessionType, setCurrentGeneration } from "../../src/sessions/session-store";
import { createSql, sqlWork } from "../../src/storage/sql";

const ref = { sessionKey: "agent:main:http:memo:dm:u", agentId: "main", sessionId: "ses_first" };

describe("ISSUE23 the session row, read once per object", () => {
  it("ISSUE23 the second read of the session row runs no SQL; a generation change is seen at once", async () => {
    const stub = env.SESSIONS.getByName(`memo-${crypto.randomUUID()}`);
    await runInDurableObject(stub, async (_i, state) => {
      const sql = createSql(state.storage.sql);
      sql.run`DELETE FROM session_state`;
      insertSession(sql, ref, "setup");
      await Promise.resolve(); // the writer's step is over
      expect(readSession(sql)).toEqual(ref);
      const before = sqlWork.statements;
      expect(readSession(sql)).toEqual(ref);
      expect(readSessionType(sql)).toBe("setup");
      expect(sqlWork.statements - before).toBe(0);
      setCurrentGeneration(sql, "ses_second");
      expect(readSession(sql)).toEqual({ ...ref, sessionId: "ses_second" });
      await Promise.resolve();
      expect(readSession(sql)).toEqual({ ...ref, sessionId: "ses_second" });
    });
  });

  it("ISSUE23 a session row read inside a transaction that rolls back is not kept", async () => {
    const stub = env.SESSIONS.getByName(`memo-rollback-${crypto.randomUUID()}`);
    await runInDurableObject(stub, async (_i, state) => {
      const sql = createSql(state.storage.sql);
      sql.run`DELETE FROM session_state`;
      await Promise.resolve();
      expect(readSession(sql)).toBeUndefined();
      expect(() =>
        state.storage.transactionSync(() => {
          insertSession(sql, ref, "ordinary");
          expect(readSession(sql)).toEqual(ref); // SQLite has it inside the transaction
          throw new Error("rolled back");
        }),
      ).toThrow("rolled back");
      await Promise.resolve();
      expect(readSession(sql)).toBeUndefined();
      expect(readSessionType(sql)).toBeUndefined();
    });
  });
});
