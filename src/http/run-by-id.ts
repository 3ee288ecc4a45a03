/**
 * A run's Durable Object, found from the run id alone: the id names the SessionDO that holds the run
 * (src/runs/ids.ts), so neither `/v1/runs/{run_id}` nor `/api/admin/runs/{run_id}` scans anything.
 */
import type { Context } from "hono";
import { GatewayError } from "../errors";
import { runObjectId } from "../runs/ids";
import type { SessionDO } from "../sessions/SessionDO";
import type { AppEnv } from "./router";

/** The stub of the object holding `runId`; 404 `no run <id>` when the id names no object of this namespace. */
export function runStub(c: Context<AppEnv>, runId: string): DurableObjectStub<SessionDO> {
  const objectId = runObjectId(runId);
  if (!objectId) throw runNotFound(runId);
  let id: DurableObjectId;
  try {
    id = c.env.SESSIONS.idFromString(objectId);
  } catch {
    throw runNotFound(runId); // not an id of this namespace
  }
  return c.env.SESSIONS.get(id);
}

/** 404 `no run <id>`. */
export const runNotFound = (runId: string) => new GatewayError("resource.not_found", `no run ${runId}`);
