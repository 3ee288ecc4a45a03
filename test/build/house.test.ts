/**
 * The shape of the house (issue 22), held: the SessionDO facade and the run engine stay short, no function in
 * src/runs or src/sessions runs over a screenful, neither file holds SQL (statements live in store modules), and
 * the README fits on a few screens, and the HTTP layer sits on the domains, never under them. The same figures print
 * with `npm run house` (scripts/house-check.mjs).
 */
import { describe, expect, it } from "vitest";
import { ENGINE, FACADE, HTTP_ENTRY, httpImportsIn, importCircles, LIMITS, measure } from "../../scripts/house-check.mjs";

const m = measure();

describe("ISSUE22 the house", () => {
  it(`ISSUE22 ${FACADE} is a facade of at most ${LIMITS.facadeLines} lines`, () => {
    expect(m.facadeLines).toBeLessThanOrEqual(LIMITS.facadeLines);
  });

  it(`ISSUE22 ${ENGINE} reads as the run's lifecycle in at most ${LIMITS.engineLines} lines`, () => {
    expect(m.engineLines).toBeLessThanOrEqual(LIMITS.engineLines);
  });

  it(`ISSUE22 no function in src/runs or src/sessions is over ${LIMITS.functionLines} lines`, () => {
    expect(m.overLong.map((f) => `${f.file}:${f.line} ${f.name} (${f.lines} lines)`)).toEqual([]);
  });

  it("ISSUE22 neither the facade nor the engine holds an SQL statement", () => {
    expect(m.sql).toEqual({ [FACADE]: [], [ENGINE]: [] });
  });

  it(`ISSUE22 the README is at most ${LIMITS.readmeBytes} bytes`, () => {
    expect(m.readmeBytes).toBeLessThanOrEqual(LIMITS.readmeBytes);
  });
});

describe("ISSUE22 doors", () => {
  it('ISSUE22 the admin API is guarded once: requireScope("admin") appears in code only where src/http/admin/index.ts mounts it', async () => {
    const { readdirSync, readFileSync, statSync } = await import("node:fs");
    const { join, relative } = await import("node:path");
    const root = join(import.meta.dirname, "..", "..");
    const files = (dir: string): string[] =>
      readdirSync(dir).flatMap((n) =>
        statSync(join(dir, n)).isDirectory() ? files(join(dir, n)) : /\.tsx?$/.test(n) ? [join(dir, n)] : [],
      );
    const uses = files(join(root, "src")).flatMap((f) =>
      readFileSync(f, "utf8")
        .split("\n")
        .filter((line) => !/^\s*(\*|\/\/)/.test(line) && line.includes('requireScope("admin")'))
        .map(() => relative(root, f)),
    );
    expect(uses).toEqual(["src/http/admin/index.ts"]);
  });
});

describe("ISSUE23 the HTTP layer sits on the domains", () => {
  it(`ISSUE23 nothing outside src/http imports from src/http but the Worker's entry, ${HTTP_ENTRY}`, () => {
    expect(m.httpImports).toEqual([]);
  });

  // Issue 34 measured 10 circles (36 files, 3 that load modules) and asks for 0: a ratchet, lowered as they are cut
  // (3 over 12 files and 1 once seven were cut, the largest, config ↔ tools, among them).
  it("ISSUE34 no new import circle: at most 3 in src/ (12 files), at most 1 of them a value circle", () => {
    expect(m.circles.all.length).toBeLessThanOrEqual(3);
    expect(m.circles.all.flat().length).toBeLessThanOrEqual(12);
    expect(m.circles.value.length).toBeLessThanOrEqual(1);
  });

  // Issue 34 measured 11 `as unknown as` and functions of 227 and 191 lines outside src/runs and src/sessions; it asks
  // for no function over 80 lines and no file over 400 in all of src/, and casts only on an allowlist. Ratchets.
  it("ISSUE34 all of src/: at most 23 functions over 80 lines, 6 files over 400 lines, 11 `as unknown as` — none added", () => {
    expect(m.all.functionsOver80).toBeLessThanOrEqual(23);
    expect(m.all.filesOver400.length).toBeLessThanOrEqual(6);
    expect(m.all.doubleCasts.length).toBeLessThanOrEqual(11);
  });

  it("ISSUE34 the circle count sees a circle through value imports, one through a type-only import, and no circle in a chain", () => {
    const g = (edges: Record<string, [string, boolean][]>) =>
      new Map(Object.entries(edges).map(([from, to]) => [from, to.map(([t, value]) => ({ to: t, value }))]));
    const c = importCircles(
      g({
        a: [["b", true]],
        b: [["c", true]],
        c: [["a", true]],
        d: [["e", true]],
        e: [["d", false]],
        f: [["g", true]],
        g: [],
      }),
    );
    expect(c).toEqual({
      all: [
        ["a", "b", "c"],
        ["d", "e"],
      ],
      value: [["a", "b", "c"]],
    });
  });

  it("ISSUE23 the rule sees a static import, a re-export and a dynamic import of src/http, and nothing else", () => {
    const text = [
      'import { invalidRequestFromZod } from "../http/router";',
      'import type { AppEnv } from "../http/router";',
      'export { SocketServerFrame } from "../http/v1/socket-frames";',
      'const app = await import("../http/app");',
      'import { GatewayError } from "../errors";',
      'import { z } from "@hono/zod-openapi";',
      'import { x } from "./http/local";',
    ].join("\n");
    expect(httpImportsIn("src/openai/example.ts", text)).toEqual([
      { file: "src/openai/example.ts", line: 1, from: "../http/router" },
      { file: "src/openai/example.ts", line: 2, from: "../http/router" },
      { file: "src/openai/example.ts", line: 3, from: "../http/v1/socket-frames" },
      { file: "src/openai/example.ts", line: 4, from: "../http/app" },
    ]);
    expect(httpImportsIn("src/http/v1/example.ts", text)).toEqual([]);
    expect(httpImportsIn(HTTP_ENTRY, 'import { createApp } from "./http/app";')).toEqual([]);
  });
});

describe("ISSUE22 test/ mirrors src/", () => {
  it("ISSUE22 every workers test file sits in a folder named after the src/ folder it tests", async () => {
    const { readdirSync, statSync } = await import("node:fs");
    const { join } = await import("node:path");
    const root = join(import.meta.dirname, "..", "..");
    const sources = new Set(readdirSync(join(root, "src")).filter((d) => statSync(join(root, "src", d)).isDirectory()));
    const own = new Set(["build", "browser", "support", "fixtures"]);
    const test = join(root, "test");
    const loose = readdirSync(test).filter((f) => f.endsWith(".test.ts"));
    const strays = readdirSync(test).filter((d) => statSync(join(test, d)).isDirectory() && !own.has(d) && !sources.has(d));
    expect({ loose, strays }).toEqual({ loose: [], strays: [] });
  });
});
