/**
 * A WebSocket conversation (GET /v1/chat/socket) from a test: the configuration put in force for the Worker and the
 * session objects, the upgrade through the Worker's app, and an accepted client socket that keeps every frame.
 * Shared by the socket route's tests (test/http/websocket.test.ts) and the leak guard's routes (issue 33).
 */
import { env } from "cloudflare:workers";
import type { GatewayConfig } from "../../src/config/schema";
import { forgetConfigInForce, postConfigVersion } from "../../src/config/versions";
import { forgetAdminGenerations } from "../../src/storage/admin-generation";
import { ALICE, type App, appFor } from "./runs";

/** `config` in force for the Worker (the app) and for the session objects (posted to D1, caches dropped). */
export async function inForce(config: GatewayConfig): Promise<App> {
  const posted = await postConfigVersion(env.DB, config, { actor: "test", now: new Date() });
  if (!posted.ok) throw new Error(`config not posted: ${JSON.stringify(posted)}`);
  forgetAdminGenerations();
  forgetConfigInForce();
  return appFor(config);
}

/** The upgrade request through the Worker's app. */
export function upgrade(
  app: App,
  roomId: string,
  o: { token?: string; headers?: Record<string, string>; query?: string; agent?: string } = {},
) {
  const headers: Record<string, string> = { Upgrade: "websocket", ...o.headers };
  if (o.token) headers.Authorization = `Bearer ${o.token}`;
  const query = o.query ?? `agent_id=${o.agent ?? "main"}&room_id=${roomId}&user_id=u1`;
  return app.request(`https://gateway.test/v1/chat/socket?${query}`, { headers }, env);
}

/** An accepted client socket and every frame it has received. */
export interface Client {
  ws: WebSocket;
  frames: any[];
  closed: Promise<CloseEvent>;
  send(frame: unknown): void;
  /** Waits until a received frame matches, and returns it. */
  until(match: (f: any) => boolean, timeoutMs?: number): Promise<any>;
}

export async function connect(app: App, roomId: string, token = ALICE, headers: Record<string, string> = {}): Promise<Client> {
  const res = await upgrade(app, roomId, { token, headers });
  if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade answered ${res.status}: ${await res.text()}`);
  const ws = res.webSocket;
  ws.accept();
  const frames: any[] = [];
  ws.addEventListener("message", (e) => frames.push(JSON.parse(e.data as string)));
  const closed = new Promise<CloseEvent>((r) => ws.addEventListener("close", r));
  return {
    ws,
    frames,
    closed,
    send: (frame) => ws.send(typeof frame === "string" ? frame : JSON.stringify(frame)),
    async until(match, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = frames.find(match);
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`no matching frame; got ${JSON.stringify(frames)}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
  };
}
