/**
 * Sophie Gateway — the Worker entry. Thin by design: `fetch` is the Hono app,
 * `scheduled` is the cron tick, and the Durable Object classes are re-exported.
 */
import { bundledConfig } from "./config/load";
import { createApp } from "./http/app";
import { createLogger } from "./observability/logger";
import { runSchedulerTick } from "./scheduler/tick";

export { IdempotencyDO } from "./idempotency/IdempotencyDO";
export { SessionDO } from "./sessions/SessionDO";

const app = createApp();

export default {
  fetch: app.fetch,
  async scheduled(controller, env) {
    const config = bundledConfig();
    await runSchedulerTick(env, controller, createLogger(config.logging.level), { config });
  },
} satisfies ExportedHandler<Env>;
