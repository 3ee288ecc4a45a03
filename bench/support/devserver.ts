/**
 * Helpers the end-to-end benches share: the project root, free ports, the
 * sample statistics every bench reports, workerd's CPU time from /proc, and
 * stopping a detached `wrangler dev` with everything in its process group.
 */
import { type ChildProcess, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createServer as createNetServer } from "node:net";
import { join } from "node:path";

/** The development config the benches run the gateway with (its model is the offline one on 127.0.0.1:8790). */
export const DEV_CONFIG = "config/gateway.dev.json5";
/** The port config/gateway.dev.json5 points the `local` provider at. */
export const MODEL_PORT = 8790;

/** The project root: `npm run bench` runs from it (each bench bundle is imported from a data: URL). */
export function projectRoot(tag: string): string {
  const root = process.cwd();
  if (!existsSync(join(root, "wrangler.toml")) || !existsSync(join(root, DEV_CONFIG)))
    throw new Error(`${tag}: run it from the project root (npm run bench); ${root} has no wrangler.toml`);
  return root;
}

/** A port nobody listens on right now (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createNetServer();
    probe.unref();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Sorted-sample quantile (the same convention as bench/prompts.bench.ts). */
export function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}
export const median = (values: readonly number[]) => quantile(values, 0.5);
export const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;

/**
 * CPU time (ms) used so far by the workerd processes of a process group (Linux /proc; null elsewhere).
 * Processes that exit in between are not counted, so compare it only across a steady phase.
 */
export function workerdCpuMs(group: number, ticksPerS: number): number | null {
  if (!existsSync("/proc/self/stat")) return null;
  let total = 0;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // fields[0] is field 3 (state)
    if (comm !== "workerd" || Number(fields[2]) !== group) continue;
    total += ((Number(fields[11]) + Number(fields[12])) / ticksPerS) * 1000; // utime + stime
  }
  return total;
}

/** Ends a detached child and everything in its process group; waits for it to exit (SIGKILL after 5 s). */
export async function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child?.pid || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), sig);
    } catch {
      /* already gone */
    }
  };
  signal("SIGTERM");
  const clean = await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]);
  signal("SIGKILL"); // stragglers in the group (workerd) that outlived wrangler, or wrangler itself
  if (!clean) await Promise.race([exited, sleep(2000)]);
}

/** Rebuilds src/generated from the shipped config (wrangler's build step wrote the development one). */
export function restoreGenerated(root: string, env: NodeJS.ProcessEnv, tag: string): void {
  const rebuilt = spawnSync(process.execPath, [join(root, "scripts", "build.mjs")], { cwd: root, env, encoding: "utf8" });
  if (rebuilt.status !== 0) console.error(`${tag}: restoring src/generated failed:\n${rebuilt.stdout}${rebuilt.stderr}`);
}

/** Applies migrations/ to the local D1 database under `persist`. */
export function applyD1Migrations(root: string, env: NodeJS.ProcessEnv, persist: string, tag: string): void {
  const wrangler = join(root, "node_modules", ".bin", "wrangler");
  const migrate = spawnSync(wrangler, ["d1", "migrations", "apply", "DB", "--local", "--persist-to", persist], {
    cwd: root,
    env,
    encoding: "utf8",
    timeout: 120_000,
  });
  if (migrate.status !== 0) throw new Error(`${tag}: D1 migrations failed:\n${migrate.stdout}${migrate.stderr}`);
}
