/**
 * The cron tick (wrangler.toml `* * * * *`): it runs through the Worker's
 * `scheduled` handler and records a heartbeat in D1 that operators can read.
 */
import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import worker from "../src/index";

describe("scheduled()", () => {
  it("records the tick's scheduled time as the cron heartbeat in D1", async () => {
    const first = createScheduledController({ scheduledTime: new Date("2026-11-25T10:00:00Z"), cron: "* * * * *" });
    await worker.scheduled(first, env);
    const second = createScheduledController({ scheduledTime: new Date("2026-11-25T10:01:00Z"), cron: "* * * * *" });
    await worker.scheduled(second, env);
    const rows = await env.DB.prepare("SELECT name, last_at, detail FROM gateway_heartbeats").all();
    expect(rows.results).toEqual([{ name: "cron", last_at: "2026-11-25T10:01:00.000Z", detail: '{"cron":"* * * * *"}' }]);
  });
});
