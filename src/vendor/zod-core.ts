/** `z.core` as the Worker bundles it (see ./zod.ts): zod's core with English as its only locale. */
import en from "zod/v4/locales/en.js";

export * from "zod/v4/core";
/** The locales this bundle carries: English only. */
export const locales = Object.freeze({ en });
