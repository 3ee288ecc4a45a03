/**
 * The cron tick (every minute). It records a heartbeat in D1 so that operators
 * can see the trigger is firing; finding and dispatching due jobs is added here
 * by the scheduler work. It never runs a model call itself.
 */
import type { Logger } from "../observability/logger";

/** Records that the tick ran at `scheduledTime`. */
export async function runSchedulerTick(
  env: Pick<Env, "DB">,
  controller: Pick<ScheduledController, "scheduledTime" | "cron">,
  logger: Logger,
): Promise<void> {
  const at = new Date(controller.scheduledTime).toISOString();
  await env.DB.prepare(
    "INSERT INTO gateway_heartbeats (name, last_at, detail) VALUES ('cron', ?1, ?2) ON CONFLICT (name) DO UPDATE SET last_at = excluded.last_at, detail = excluded.detail",
  )
    .bind(at, JSON.stringify({ cron: controller.cron }))
    .run();
  logger.log("info", "scheduler.tick", { scheduled_time: at, cron: controller.cron });
}
