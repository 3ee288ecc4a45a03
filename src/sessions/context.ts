/**
 * What every session module works on, handed over by the SessionDO facade once: this object's state and
 * SQLite storage, its env (with the admin-stored secrets laid over it), and its id. Modules take it as their
 * first argument instead of reaching into the Durable Object, so each can be called from a test through
 * `runInDurableObject` (see `sessionContext`).
 */
import { refreshStoredSecrets } from "../security/stored-secrets";
import { createSql, type Sql } from "../storage/sql";

/** This session object's storage, env and id. */
export interface SessionContext {
  readonly sql: Sql;
  readonly state: DurableObjectState;
  readonly storage: DurableObjectStorage;
  /** The env in force: the deployed one with admin-stored secrets laid over it (kept current by `refreshSecrets`). */
  readonly env: Env;
  readonly objectId: string;
  /** Lays the admin-stored secrets over `env` again (at most one D1 probe per few seconds per isolate). */
  refreshSecrets(): Promise<void>;
}

/** A new random id with a prefix (`ses_…`). */
export const newId = (prefix: string): string => `${prefix}_${crypto.randomUUID().replaceAll("-", "")}`;

/**
 * The context of a session object. `env` is updated in place by `refreshSecrets`; if D1 cannot be read, the
 * values already in place serve (a provider key rotated a moment ago is picked up on the next entry).
 */
export function sessionContext(
  state: DurableObjectState,
  env: Env,
  baseEnv: Env = env,
  sql: Sql = createSql(state.storage.sql),
): SessionContext {
  return {
    sql,
    state,
    storage: state.storage,
    env,
    objectId: state.id.toString(),
    refreshSecrets: async () => {
      try {
        await refreshStoredSecrets(env as unknown as Record<string, unknown>, baseEnv);
      } catch {
        // Keep what is in place; the next entry tries again.
      }
    },
  };
}
