/**
 * Sophie Gateway — the Worker entry. Thin by design: `fetch` is the Hono app,
 * `scheduled` is the cron tick, and the Durable Object classes are re-exported.
 */
import { bundledConfig } from "./config/load";
import { configInForce } from "./config/versions";
import { createApp } from "./http/app";
import { createLogger } from "./observability/logger";
import { runSchedulerTick } from "./scheduler/tick";

export { IdempotencyDO } from "./idempotency/IdempotencyDO";
export { SessionDO } from "./sessions/SessionDO";

const app = createApp();

export default {
  fetch: app.fetch,
  async scheduled(controller, env) {
    // The tick follows admin-posted config versions like the API does; if D1 is unreadable the tick fails anyway.
    const { config, ...configRef } = await configInForce(env.DB).catch(() => ({
      config: bundledConfig(),
      source: "bundled" as const,
      version: 0,
      sha256: "",
    }));
    await runSchedulerTick(env, controller, createLogger(config.logging.level), { config, configRef });
  },
} satisfies ExportedHandler<Env>;
