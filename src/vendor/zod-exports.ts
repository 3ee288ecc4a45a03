/** The names `zod` exports, with `locales` and `core` carrying English only (see ./zod.ts for why). */
import en from "zod/v4/locales/en.js";
import * as core from "./zod-core";

export * from "zod/v4";
/** The locales this bundle carries: English only. */
export const locales = Object.freeze({ en });
export { core };
/**
 * zod's namespace has no `z` of its own; `zod/v4` also exports `z`, its whole namespace (every locale included),
 * which this keeps out. ./zod.ts exports the real `z`: this module's namespace.
 */
export const z = undefined;
