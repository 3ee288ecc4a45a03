/**
 * The zod the Worker runs (src/vendor/zod.ts): wrangler.toml's [alias] and vitest.config.ts send every
 * `import … from "zod"` there, so the tests validate with the module production bundles.
 */
import { z as openapiZ } from "@hono/zod-openapi";
import { describe, expect, it } from "vitest";
import { z } from "zod";

describe("ISSUE23 bundle: zod with English only", () => {
  it("ISSUE23 every import of zod, @hono/zod-openapi's included, is the vendored module: its locales are English only", () => {
    expect(Object.keys(z.locales)).toEqual(["en"]);
    expect(Object.keys(z.core.locales)).toEqual(["en"]);
    expect(openapiZ).toBe(z);
  });

  it("ISSUE23 zod still reports its errors in English, as before", () => {
    const result = z.strictObject({ n: z.number().int().max(3) }).safeParse({ n: 4.5, extra: true });
    expect(result.success).toBe(false);
    expect(result.error?.issues.map((i) => i.message)).toEqual([
      "Invalid input: expected int, received number",
      'Unrecognized key: "extra"',
    ]);
  });
});
