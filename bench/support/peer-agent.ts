/**
 * The peer (Cloudflare's Agents SDK: an `AIChatAgent`, /work/shared/peers/agents-sdk) under `wrangler dev`, pointed
 * at a model server of the bench's own, and a headless client for its WebSocket chat protocol — for the figures
 * that need the peer against the same model as ours in the same run (bench/stream.bench.ts with `--peer`). The
 * peer's own harness (its run.sh, bench/support/report.mjs runPeer) only knows its zero-latency mock.
 * The peer directory is read-only and outside the repo: it is copied to a temporary directory, and its exact
 * dependencies are installed there from its package-lock.json (`npm ci --prefer-offline`: the npm cache when it
 * has them), as its run.sh does, unless the directory ships node_modules (then they are linked).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { closeSync, cpSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startWranglerDev, stopChild, type WranglerDev } from "./devserver";

/** Where the peer project is (SOPHIE_PEER_DIR overrides). */
export const PEER_DIR = process.env.SOPHIE_PEER_DIR ?? "/work/shared/peers/agents-sdk";

/** A copy of the peer project with its dependencies installed, from {@link preparePeer}. */
export interface PeerCopy {
  tmp: string;
  work: string;
}

/** Copies the peer project to a temporary directory and installs its locked dependencies there (about 35 s here). */
export async function preparePeer(tag: string): Promise<PeerCopy> {
  if (!existsSync(join(PEER_DIR, "package-lock.json")) || !existsSync(join(PEER_DIR, "wrangler.jsonc")))
    throw new Error(`no peer project at ${PEER_DIR} (package-lock.json, wrangler.jsonc)`);
  const tmp = mkdtempSync(join(tmpdir(), "sophie-peer-agent-"));
  const work = join(tmp, "agents-sdk");
  try {
    const skip = new Set(["node_modules", ".wrangler", "results"].map((d) => join(PEER_DIR, d)));
    cpSync(PEER_DIR, work, { recursive: true, filter: (src) => !skip.has(src) });
    spawnSync("chmod", ["-R", "u+w", work]); // the source is read-only, and so is the copy's every directory
    if (existsSync(join(PEER_DIR, "node_modules"))) symlinkSync(join(PEER_DIR, "node_modules"), join(work, "node_modules"), "dir");
    else await install(work, join(tmp, "npm-ci.log"), tag);
    return { tmp, work };
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
}

/** `npm ci` in the copy, from the npm cache when it has every package; its output in `logFile`. */
async function install(work: string, logFile: string, tag: string): Promise<void> {
  const fd = openSync(logFile, "w");
  const child = spawn("npm", ["ci", "--prefer-offline", "--no-audit", "--no-fund"], { cwd: work, stdio: ["ignore", fd, fd] });
  closeSync(fd);
  const timer = setTimeout(() => child.kill("SIGKILL"), 300_000);
  const code = await new Promise<number | null>((resolve) => {
    child.once("exit", (c) => resolve(c));
    child.once("error", () => resolve(-1));
  });
  clearTimeout(timer);
  if (code !== 0) throw new Error(`${tag}: the peer's npm ci failed (exit ${code}): ${readFileSync(logFile, "utf8").slice(-500)}`);
}

/** The peer's Worker under `wrangler dev`, from {@link startPeer}. */
export interface PeerAgent {
  dev: WranglerDev;
  /** Ends wrangler and removes the copy (kept, with a message, when `ok` is false). */
  dispose(ok: boolean): Promise<void>;
}

/** Starts the copy's Worker on free ports with MODEL_BASE_URL pointed at the model on `modelPort` (as its run.sh does). */
export async function startPeer(copy: PeerCopy, modelPort: number, tag: string): Promise<PeerAgent> {
  let child: ChildProcess | undefined;
  const interrupted = () => {
    if (child?.pid) process.kill(-child.pid, "SIGKILL");
  };
  process.once("SIGINT", interrupted);
  const logFile = join(copy.tmp, "wrangler.log");
  const dev = await startWranglerDev({
    tag,
    root: copy.work,
    cwd: copy.work,
    args: ["--persist-to", join(copy.tmp, "state"), "--var", `MODEL_BASE_URL:http://127.0.0.1:${modelPort}/v1`],
    env: process.env,
    logFile,
    healthPath: "/",
    ready: () => true, // the peer answers 404 outside /agents/: any answer means the Worker is up
  }).catch((err) => {
    process.off("SIGINT", interrupted);
    throw err;
  });
  child = dev.child;
  return {
    dev,
    async dispose(ok) {
      await stopChild(child, false);
      process.off("SIGINT", interrupted);
      if (ok) rmSync(copy.tmp, { recursive: true, force: true });
      else console.error(`${tag}: the peer's wrangler output kept in ${logFile}`);
    },
  };
}

/** One `cf_agent_use_chat_response` frame (the body is one JSON-encoded UIMessageChunk). */
interface ChatFrame {
  type: string;
  id?: string;
  body?: string;
  done?: boolean;
  error?: boolean;
}

/**
 * One conversation with the peer's AIChatAgent over its WebSocket, spoken as its useAgentChat transport does
 * (see the peer's bench/client.mjs): a turn sends `cf_agent_use_chat_request` with the whole history and ends on
 * the `cf_agent_use_chat_response` frame with `done: true`; the text arrives as `text-delta` chunks.
 */
export class PeerConversation {
  readonly #ws: WebSocket;
  #history: object[] = [];
  #turn: ((f: ChatFrame) => void) | undefined;
  #n = 0;

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.addEventListener("message", (e) => {
      const f = JSON.parse(String(e.data)) as ChatFrame; // identity, state, chat_messages ... are ignored below
      if (f.type === "cf_agent_use_chat_response") this.#turn?.(f);
    });
  }

  /** Opens the socket of conversation `name` (`/agents/chat-agent/<name>`). */
  static async open(base: string, name: string): Promise<PeerConversation> {
    const ws = new WebSocket(`${base.replace(/^http/, "ws")}/agents/chat-agent/${encodeURIComponent(name)}`);
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener("open", () => resolve(), { once: true });
      ws.addEventListener("error", () => reject(new Error(`peer: could not open its socket at ${base}`)), { once: true });
    });
    return new PeerConversation(ws);
  }

  /** One turn: ms from sending the request to the first frame carrying a text delta and to the `done` frame. */
  async turn(text: string, timeoutMs = 30_000): Promise<{ first: number; done: number; text: string }> {
    const n = this.#n++;
    const id = `t${n}${Math.random().toString(36).slice(2, 8)}`;
    const user = { id: `u${id}`, role: "user", parts: [{ type: "text", text }] };
    let answer = "";
    let first = -1;
    const t0 = performance.now();
    const done = new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`peer: turn timed out after ${timeoutMs} ms`)), timeoutMs);
      this.#turn = (f) => {
        if (f.id !== id) return;
        if (f.error) reject(new Error(`peer: error frame ${f.body ?? ""}`.slice(0, 300)));
        const chunk = f.body?.trim() ? (JSON.parse(f.body) as { type?: string; delta?: string }) : undefined;
        if (chunk?.type === "text-delta" && chunk.delta) {
          if (first < 0) first = performance.now() - t0;
          answer += chunk.delta;
        }
        if (f.done || f.error) clearTimeout(timer);
        if (f.done) resolve(performance.now() - t0);
      };
    });
    const messages = [...this.#history, user];
    this.#ws.send(
      JSON.stringify({
        id,
        init: { method: "POST", body: JSON.stringify({ messages, trigger: "submit-message" }) },
        type: "cf_agent_use_chat_request",
      }),
    );
    const doneMs = await done.finally(() => {
      this.#turn = undefined;
    });
    // The next turn sends the history, as useChat does.
    this.#history = [...messages, { id: `a${id}`, role: "assistant", parts: [{ type: "text", text: answer }] }];
    return { first, done: doneMs, text: answer };
  }

  /** Closes the socket. */
  close(): void {
    this.#ws.close(1000, "bench done");
  }
}
