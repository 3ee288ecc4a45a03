/**
 * zod as the Worker bundles it: everything `zod` exports, with English as its only locale. wrangler.toml's
 * [alias] (and vitest.config.ts, so the tests run the same module) sends every `import … from "zod"` here — ours
 * and those inside @hono/zod-openapi and @asteasolutions/zod-to-openapi.
 *
 * Why: @hono/zod-openapi hands zod's whole namespace to `extendZodWithOpenApi(z)`, so the bundler must keep
 * every export of it, and `z.locales` / `z.core.locales` pull in all ~60 translations of zod's error messages
 * (≈260 KiB raw, ≈40 KiB gzipped). The gateway writes its own error messages in English (src/config/parse.ts,
 * the OpenAPI validation hook), so only `en`, which zod installs by default, is kept. A module's own export wins
 * over a name `export *` brings in, so `locales` and `core` in ./zod-exports.ts replace zod's; validation and /openapi.json are
 * unchanged (test/build/bundle.test.ts, test/http/openapi.test.ts).
 */
import * as z from "./zod-exports";

export * from "./zod-exports";
export { z, z as default };
