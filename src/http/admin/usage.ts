/**
 * Usage and cost, the admin side (issue 25 §2, D-078):
 *   GET /api/admin/usage?from&to&group_by=caller|agent|model|job|day
 * Totals per group over whole UTC days, read from the D1 rollups alone (migrations/0020_usage.sql) — one indexed range
 * of the rollups' key, never a scan of runs. docs/usage.md says what each figure counts.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GatewayError } from "../../errors";
import { usdOfPico } from "../../usage/cost";
import { USAGE_GROUPS, type UsageGroupRow, usageSeries, usageTotals } from "../../usage/store";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";

/** The longest range one query may cover, in days (inclusive). */
export const MAX_USAGE_DAYS = 366;

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const Day = z.iso.date("an ISO date, YYYY-MM-DD (UTC)");

const Totals = {
  requests: z.number().int().openapi({ description: "Model calls that answered" }),
  runs: z.number().int().openapi({ description: "Runs that made at least one model call (a run counts on the UTC day it was created)" }),
  unreported_requests: z
    .number()
    .int()
    .openapi({ description: "Model calls whose provider reported no usage: their tokens are not counted" }),
  uncosted_requests: z
    .number()
    .int()
    .openapi({ description: "Model calls with no cost known (model without pricing, or no usage reported)" }),
  prompt_tokens: z.number().int().openapi({ description: "Provider-reported, cached included" }),
  completion_tokens: z.number().int(),
  cached_tokens: z.number().int(),
  total_tokens: z.number().int(),
  cost_usd: z
    .string()
    .nullable()
    .openapi({ description: "Cost of the costed calls, USD as an exact decimal string; null when no call in the group had one" }),
};

const UsageGroup = z
  .object({
    key: z
      .string()
      .nullable()
      .openapi({ description: "The caller key, agent id, provider:model, job id (null: runs no job started) or UTC day" }),
    ...Totals,
  })
  .openapi("UsageGroup");

const usageRoute = createRoute({
  method: "get",
  path: "/usage",
  summary: "Usage and cost totals per caller, agent, model, job or day, from the rollups",
  description:
    "Whole UTC days `from`..`to`, both included, at most 366 days. Figures are provider-reported tokens and costs computed from `models.providers.<id>.models.<m>.pricing` when each call was made (docs/usage.md). The rollups lag the runs by about a second (they ship with the run-stop batch).",
  request: {
    query: z.object({
      from: Day.openapi({ description: "First UTC day, YYYY-MM-DD", example: "2026-11-01" }),
      to: Day.openapi({ description: "Last UTC day, YYYY-MM-DD (included)", example: "2026-11-30" }),
      group_by: z.enum(Object.keys(USAGE_GROUPS) as [keyof typeof USAGE_GROUPS]).openapi({ description: "What each total is per" }),
      series: z
        .enum(["day"])
        .optional()
        .openapi({ description: "`day`: also each group's totals per UTC day (`series`), for a chart (issue 25 §3, D-082)" }),
    }),
  },
  responses: {
    200: {
      description: "Totals per group (ordered by key) and over all of them",
      content: json(
        z
          .object({
            from: z.string(),
            to: z.string(),
            group_by: z.string(),
            groups: z.array(UsageGroup),
            total: z.object(Totals).openapi("UsageTotals"),
            series: z
              .array(z.object({ day: z.string().openapi({ description: "The UTC day, YYYY-MM-DD" }), ...UsageGroup.shape }))
              .optional()
              .openapi({
                description: "With `series=day`: each group's totals on each day it has any, ordered by day then key",
              }),
          })
          .openapi("Usage"),
      ),
    },
    400: { description: "A bad parameter (named in the message)", content: json(ErrorEnvelope) },
    401: { description: "Missing or invalid token", content: json(ErrorEnvelope) },
  },
});

type Totals = Omit<z.infer<typeof UsageGroup>, "key">;

/** A group's totals as the API shows them. */
function totalsOf(r: Omit<UsageGroupRow, "key">): Totals {
  return {
    requests: r.requests,
    runs: r.runs,
    unreported_requests: r.unreported_requests,
    uncosted_requests: r.uncosted_requests,
    prompt_tokens: r.prompt_tokens,
    completion_tokens: r.completion_tokens,
    cached_tokens: r.cached_tokens,
    total_tokens: r.prompt_tokens + r.completion_tokens,
    cost_usd: r.uncosted_requests >= r.requests && r.requests > 0 ? null : usdOfPico(r.cost_pico ?? "0"),
  };
}

/** The sum of the groups (cost added exactly, as pico-USD integers). */
function overall(rows: readonly UsageGroupRow[]): Totals {
  const sum = (f: (r: UsageGroupRow) => number) => rows.reduce((n, r) => n + f(r), 0);
  return totalsOf({
    requests: sum((r) => r.requests),
    runs: sum((r) => r.runs),
    unreported_requests: sum((r) => r.unreported_requests),
    uncosted_requests: sum((r) => r.uncosted_requests),
    prompt_tokens: sum((r) => r.prompt_tokens),
    completion_tokens: sum((r) => r.completion_tokens),
    cached_tokens: sum((r) => r.cached_tokens),
    cost_pico: rows.reduce((n, r) => n + BigInt(r.cost_pico ?? "0"), 0n).toString(),
  });
}

/** The number of days `from`..`to` covers (both included). */
const daysBetween = (from: string, to: string) => (Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / 86_400_000 + 1;

/** The admin's usage route. */
export function adminUsageRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(usageRoute, async (c) => {
    const q = c.req.valid("query");
    const days = daysBetween(q.from, q.to);
    if (!(days >= 1)) throw new GatewayError("invalid.request", `to: must not be before from (${q.from})`);
    if (days > MAX_USAGE_DAYS) throw new GatewayError("invalid.request", `to: the range covers ${days} days, more than ${MAX_USAGE_DAYS}`);
    const [rows, perDay] = await Promise.all([
      usageTotals(c.env.DB, q.from, q.to, q.group_by),
      q.series === "day" ? usageSeries(c.env.DB, q.from, q.to, q.group_by) : undefined,
    ]);
    const keyOf = (key: string) => (q.group_by === "job" && key === "" ? null : key);
    const groups = rows.map((r) => ({ key: keyOf(r.key), ...totalsOf(r) }));
    const series = perDay?.map(({ day, key, ...r }) => ({ day, key: keyOf(key), ...totalsOf(r) }));
    return c.json({ from: q.from, to: q.to, group_by: q.group_by, groups, total: overall(rows), ...(series ? { series } : {}) }, 200);
  });
  return app;
}
