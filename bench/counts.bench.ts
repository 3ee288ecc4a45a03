/**
 * What a plain turn asks of the platform, counted (issue 23, D-056): R2 puts, D1 calls and statements, SQLite
 * statements and commits, alarm writes and fires, console lines, per 1,000 plain turns — through
 * `/v1/chat/completions` in 8 long-lived conversations, and through `POST /v1/runs` with a fresh session per turn.
 *
 * Counted, not timed: the counts come from test/observability/turn-counts.test.ts, which runs real turns inside
 * workerd (the app, the SessionDOs, local R2 and D1, the model mocked at the network boundary) under the counting
 * wrapper of test/support/counters.ts, and prints them on one line (`ISSUE23_COUNTS {...}`). Nothing in src/ counts:
 * the wrapper sits on the bindings' prototypes in the test isolate. Background shipping is included (the test
 * counts until nothing has moved for 5 s). The figures do not depend on the machine's load.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { projectRoot } from "./support/devserver";

const TAG = "counts bench";
const MARK = "ISSUE23_COUNTS ";

export async function run(quick: boolean) {
  const root = projectRoot(TAG);
  const turns = quick ? 24 : 200;
  const out = spawnSync(
    process.execPath,
    [join(root, "node_modules", "vitest", "vitest.mjs"), "run", "--project", "workers", "test/observability/turn-counts.test.ts"],
    {
      cwd: root,
      env: { ...process.env, COUNT_TURNS: String(turns), FORCE_COLOR: "0", NO_COLOR: "1" },
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
    },
  );
  const line = (out.stdout ?? "").split("\n").find((l) => l.startsWith(MARK));
  if (out.status !== 0 || !line)
    throw new Error(
      `${TAG}: vitest exited ${out.status}${line ? "" : " without the counts line"}:\n${(out.stdout ?? "").slice(-2000)}${(out.stderr ?? "").slice(-1000)}`,
    );
  return {
    source: "test/observability/turn-counts.test.ts (workerd, counted on the bindings' prototypes; background shipping included)",
    ...(JSON.parse(line.slice(MARK.length)) as Record<string, unknown>),
  };
}
