/**
 * Every route group is an `OpenAPIHono` made here, so that request
 * validation failures take the same path everywhere: `invalid.request`
 * naming the first offending field, through the app's error funnel.
 */
import { OpenAPIHono, z } from "@hono/zod-openapi";
import { invalidRequestFromZod } from "../errors";

export type AppEnv = { Bindings: Env };

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
