/**
 * Every route group is an `OpenAPIHono` made here, so that request
 * validation failures take the same path everywhere: `invalid.request`
 * naming the first offending field, through the app's error funnel.
 */
import { OpenAPIHono, z } from "@hono/zod-openapi";
import type { ZodError } from "zod";
import { formatPath } from "../config/issues";
import { GatewayError } from "../errors";

export type AppEnv = { Bindings: Env };

/** The value at `path` inside `input`, or undefined when any step is missing. */
function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = input;
  for (const key of path) {
    if (v === null || typeof v !== "object" || !Object.hasOwn(v, key)) return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

/**
 * Turns a Zod failure on a request into `invalid.request` naming the first offending field.
 * With the `input` that failed, a missing field is "required" whatever its type (Zod reports a
 * missing enum as an invalid option, not as undefined).
 */
export function invalidRequestFromZod(error: ZodError, target: string, input?: unknown): GatewayError {
  const issue = error.issues[0];
  if (!issue) return new GatewayError("invalid.request", `invalid ${target}`);
  const field = issue.path.length > 0 ? formatPath(issue.path) : target;
  if (issue.code === "unrecognized_keys") {
    return new GatewayError("invalid.request", `unknown field ${formatPath([...issue.path, issue.keys[0] ?? ""])}`);
  }
  const missing =
    (issue.code === "invalid_type" && /received undefined$/.test(issue.message)) ||
    (input !== undefined && issue.code !== "custom" && issue.path.length > 0 && valueAt(input, issue.path) === undefined);
  if (missing) {
    return new GatewayError("invalid.request", `${field} is required`);
  }
  return new GatewayError("invalid.request", `${field}: ${issue.message}`);
}

/** A route group whose validation failures become `invalid.request`. */
export function createRouter(): OpenAPIHono<AppEnv> {
  return new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      // The validator hands the hook the input that failed as `data` (absent from the hook's declared type).
      if (!result.success) throw invalidRequestFromZod(result.error, result.target, (result as { data?: unknown }).data);
    },
  });
}

/** The S3 error envelope, for route documentation. */
export const ErrorEnvelopeSchema = z.object({ error: z.object({ code: z.string(), message: z.string() }) }).openapi("Error");
