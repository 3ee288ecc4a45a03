// Bindings that exist only in tests (declared in vitest.config.ts).
declare namespace Cloudflare {
  interface Env {
    TEST_MIGRATIONS: import("cloudflare:test").D1Migration[];
  }
}

// Vite's `?raw` imports (fixture files read as text).
declare module "*?raw" {
  const content: string;
  export default content;
}
