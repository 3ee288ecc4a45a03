/**
 * The counting instrument (issue 23, D-056): counts what the gateway asks of its platform — R2 operations, D1
 * calls and statements, Durable Object SQLite statements and commits, alarm writes and alarm fires, console
 * lines — by wrapping the binding classes' prototypes inside the test isolate. The Worker, every SessionDO and
 * the test share that isolate, so one wrapper sees every call, whoever makes it, without a line in src/.
 *
 * Commits are counted as workerd makes them (src/workerd/io/actor-sqlite.c++): the first write of an event-loop
 * turn outside `transactionSync` opens an implicit transaction that commits when the turn ends (one commit,
 * however many writes, alarm writes included — a SQLite-backed object keeps its alarm in the same database);
 * `transactionSync` is a savepoint of that implicit transaction — workerd's `DurableObjectStorage::transactionSync`
 * calls `notifyWrite()`, which opens the turn's implicit transaction when none is open, then `SAVEPOINT`/`RELEASE`
 * — so it never commits on its own, and writes after it in the same turn join the same commit (D-066: before, a
 * write after a `transactionSync` in its turn was counted as a second commit). A new turn is seen from JS where JS
 * is entered again from the event loop: an R2, D1 or fetch promise settling, a timer firing, a call into a Durable
 * Object (RPC, fetch, alarm). Those are wrapped here too; a `setTimeout(0)` after each first write is the backstop
 * (it fires in a later turn).
 */
import { env } from "cloudflare:workers";

/** What was counted since start (or the last reset). */
export interface Counts {
  r2Puts: number;
  r2Reads: number; // get, head, list
  r2Deletes: number;
  d1Calls: number; // round trips: a prepared statement's run/all/first/raw, one batch, one exec
  d1Statements: number;
  d1Writes: number; // statements that are not reads
  sqlStatements: number; // SqlStorage.exec calls in Durable Objects
  sqlWrites: number;
  commits: number;
  alarmWrites: number; // setAlarm
  alarmDeletes: number; // deleteAlarm
  alarmFires: number;
  consoleLines: number;
}

const zero = (): Counts => ({
  r2Puts: 0,
  r2Reads: 0,
  r2Deletes: 0,
  d1Calls: 0,
  d1Statements: 0,
  d1Writes: 0,
  sqlStatements: 0,
  sqlWrites: 0,
  commits: 0,
  alarmWrites: 0,
  alarmDeletes: 0,
  alarmFires: 0,
  consoleLines: 0,
});

/** A statement that only reads (SQLite's and D1's reads start with one of these). */
const READ = /^\s*(SELECT|WITH(?![\s\S]*\b(INSERT|UPDATE|DELETE|REPLACE)\b)|PRAGMA|EXPLAIN)\b/i;
/** Whether an SQL text writes. */
export const writes = (sql: string): boolean => !READ.test(sql);

type Fn = (...args: any[]) => any;
type Restore = () => void;

/** Replaces `name` on the object of `obj`'s prototype chain that owns it; returns the undo. */
function wrap(obj: object, name: string, make: (original: Fn) => Fn): Restore {
  let owner: any = obj;
  while (owner && !Object.hasOwn(owner, name)) owner = Object.getPrototypeOf(owner);
  if (!owner) throw new Error(`counters: no ${name} on ${obj.constructor?.name}`);
  const original = owner[name] as Fn;
  const descriptor = Object.getOwnPropertyDescriptor(owner, name);
  Object.defineProperty(owner, name, { ...descriptor, value: make(original) });
  return () => Object.defineProperty(owner, name, { ...descriptor, value: original });
}

/** A running count; `stop()` puts every wrapped method back. */
export interface Counter {
  readonly counts: Counts;
  reset(): void;
  stop(): void;
}

/**
 * Starts counting in this isolate. `storage` is any Durable Object's `ctx.storage` (its prototype is shared by
 * every object of the isolate); `alarmOwners` are Durable Object classes whose `alarm()` fires are counted.
 */
export function startCounting(storage: DurableObjectStorage, alarmOwners: { prototype: object }[] = []): Counter {
  let counts = zero();
  const undo: Restore[] = [];
  const backstop = globalThis.setTimeout.bind(globalThis);
  const sqlOf = new Map<object, { implicitOpen: boolean; explicitDepth: number }>();
  const txState = (sql: object) => {
    let s = sqlOf.get(sql);
    if (!s) {
      s = { implicitOpen: false, explicitDepth: 0 };
      sqlOf.set(sql, s);
    }
    return s;
  };
  /** JS entered again from the event loop: every object's implicit transaction of the last turn has committed. */
  const newTurn = () => {
    for (const s of sqlOf.values()) s.implicitOpen = false;
  };
  /** A promise whose settling starts a new turn (the caller's continuation runs after newTurn). */
  const settles = <T>(p: T): T =>
    p && typeof (p as { then?: unknown }).then === "function"
      ? ((p as unknown as Promise<unknown>).then(
          (v) => {
            newTurn();
            return v;
          },
          (e) => {
            newTurn();
            throw e;
          },
        ) as T)
      : p;
  /** A write outside transactionSync: the first of its turn opens the implicit transaction (one commit). */
  const written = (sql: object) => {
    const s = txState(sql);
    if (s.explicitDepth > 0 || s.implicitOpen) return;
    s.implicitOpen = true;
    counts.commits++;
    backstop(() => {
      s.implicitOpen = false;
    }, 0);
  };

  // R2: every bucket binding shares R2Bucket.prototype.
  const bucket = env.AUDIT as object;
  for (const [m, key] of [
    ["put", "r2Puts"],
    ["get", "r2Reads"],
    ["head", "r2Reads"],
    ["list", "r2Reads"],
    ["delete", "r2Deletes"],
  ] as const)
    undo.push(
      wrap(
        bucket,
        m,
        (o) =>
          function (this: unknown, ...a: any[]) {
            counts[key]++;
            return settles(o.apply(this, a));
          },
      ),
    );

  // D1: the database's batch/exec and a prepared statement's run/all/first/raw. A method that calls another
  // (first → all) is one round trip: only the outermost call counts.
  let inD1 = 0;
  const d1 = (count: (self: any, args: any[]) => void) => (o: Fn) =>
    function (this: unknown, ...a: any[]) {
      if (inD1 === 0) count(this, a);
      inD1++;
      try {
        return settles(o.apply(this, a));
      } finally {
        inD1--;
      }
    };
  const statementText = (s: any): string => String(s?.statement ?? s?.query ?? "");
  const db = env.DB as object;
  undo.push(
    wrap(
      db,
      "batch",
      d1((_s, [list]) => {
        counts.d1Calls++;
        for (const st of list as unknown[]) {
          counts.d1Statements++;
          if (writes(statementText(st))) counts.d1Writes++;
        }
      }),
    ),
  );
  undo.push(
    wrap(
      db,
      "exec",
      d1((_s, [text]) => {
        counts.d1Calls++;
        for (const one of String(text)
          .split(";")
          .filter((x) => x.trim())) {
          counts.d1Statements++;
          if (writes(one)) counts.d1Writes++;
        }
      }),
    ),
  );
  const statement = env.DB.prepare("SELECT 1") as object;
  for (const m of ["run", "all", "first", "raw"])
    undo.push(
      wrap(
        statement,
        m,
        d1((self) => {
          counts.d1Calls++;
          counts.d1Statements++;
          if (writes(statementText(self))) counts.d1Writes++;
        }),
      ),
    );

  // Durable Object storage: SQL statements, commits, alarm writes (all objects share these prototypes).
  undo.push(
    wrap(
      storage.sql,
      "exec",
      (o) =>
        function (this: object, ...a: any[]) {
          counts.sqlStatements++;
          if (writes(String(a[0]))) {
            counts.sqlWrites++;
            written(this);
          }
          return o.apply(this, a);
        },
    ),
  );
  undo.push(
    wrap(
      storage,
      "transactionSync",
      (o) =>
        function (this: DurableObjectStorage, ...a: any[]) {
          // workerd's transactionSync is `notifyWrite()` then a SAVEPOINT: it opens the turn's implicit transaction
          // (or is a savepoint of the one open) and never commits on its own.
          if (txState(this.sql).explicitDepth === 0) written(this.sql);
          const s = txState(this.sql);
          s.explicitDepth++;
          try {
            return o.apply(this, a);
          } finally {
            s.explicitDepth--;
          }
        },
    ),
  );
  for (const [m, key] of [
    ["setAlarm", "alarmWrites"],
    ["deleteAlarm", "alarmDeletes"],
  ] as const)
    undo.push(
      wrap(
        storage,
        m,
        (o) =>
          function (this: DurableObjectStorage, ...a: any[]) {
            counts[key]++;
            written(this.sql);
            return o.apply(this, a);
          },
      ),
    );
  for (const m of ["put", "delete", "deleteAll"])
    undo.push(
      wrap(
        storage,
        m,
        (o) =>
          function (this: DurableObjectStorage, ...a: any[]) {
            written(this.sql);
            return o.apply(this, a);
          },
      ),
    );

  for (const cls of alarmOwners)
    undo.push(
      wrap(
        cls.prototype,
        "alarm",
        (o) =>
          function (this: unknown, ...a: any[]) {
            newTurn();
            counts.alarmFires++;
            return o.apply(this, a);
          },
      ),
    );

  // Other ways JS is entered again: fetch answers, timers, calls into a Durable Object.
  undo.push(
    wrap(
      globalThis,
      "fetch",
      (o) =>
        function (this: unknown, ...a: any[]) {
          return settles(o.apply(this, a));
        },
    ),
  );
  undo.push(
    wrap(
      globalThis,
      "setTimeout",
      (o) =>
        function (this: unknown, fn: unknown, ...rest: any[]) {
          if (typeof fn !== "function") return o.call(this, fn, ...rest);
          return o.call(
            this,
            (...args: unknown[]) => {
              newTurn();
              return fn(...args);
            },
            ...rest,
          );
        },
    ),
  );
  for (const cls of alarmOwners)
    for (const m of Object.getOwnPropertyNames(cls.prototype))
      if (m !== "constructor" && m !== "alarm" && typeof Object.getOwnPropertyDescriptor(cls.prototype, m)?.value === "function")
        undo.push(
          wrap(
            cls.prototype,
            m,
            (o) =>
              function (this: unknown, ...a: any[]) {
                newTurn();
                return o.apply(this, a);
              },
          ),
        );

  for (const m of ["log", "info", "warn", "error", "debug"] as const)
    undo.push(
      wrap(
        console,
        m,
        (o) =>
          function (this: unknown, ...a) {
            counts.consoleLines++;
            return o.apply(this, a);
          },
      ),
    );

  return {
    get counts() {
      return counts;
    },
    reset() {
      counts = zero();
    },
    stop() {
      for (const u of undo.reverse()) u();
      undo.length = 0;
    },
  };
}

/** Counts scaled to per 1,000 turns, one decimal. */
export function per1000(c: Counts, turns: number): Counts {
  const out = zero();
  for (const k of Object.keys(out) as (keyof Counts)[]) out[k] = Math.round((c[k] * 10_000) / turns) / 10;
  return out;
}

/** Resolves once `value()` has not changed for `quietMs` (background shipping done), or after `maxMs`. */
export async function quiescent(value: () => string, quietMs: number, maxMs = 60_000): Promise<void> {
  const deadline = Date.now() + maxMs;
  let last = value();
  let since = Date.now();
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    const now = value();
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) return;
  }
}

/** Calls into a Durable Object class, by method name, while counting (issue 23 "one RPC per streamed turn"). */
export interface CallCounter {
  readonly calls: Record<string, number>;
  stop(): void;
}

/** Methods the runtime calls, not the Worker: the constructor, alarms, WebSocket handlers. */
const NOT_RPC = /^(constructor|alarm|webSocket\w*)$/;

/**
 * Counts calls of every method of `cls.prototype` (a Durable Object class): in the test isolate an RPC from the
 * Worker to one of its objects is a call of the method on that prototype, so this counts Worker→object RPCs.
 */
export function countCalls(cls: { prototype: object }): CallCounter {
  const calls: Record<string, number> = {};
  const undo: Restore[] = [];
  for (const m of Object.getOwnPropertyNames(cls.prototype))
    if (!NOT_RPC.test(m) && typeof Object.getOwnPropertyDescriptor(cls.prototype, m)?.value === "function")
      undo.push(
        wrap(
          cls.prototype,
          m,
          (o) =>
            function (this: unknown, ...a: any[]) {
              calls[m] = (calls[m] ?? 0) + 1;
              return o.apply(this, a);
            },
        ),
      );
  return {
    calls,
    stop() {
      for (const u of undo.reverse()) u();
    },
  };
}
