/**
 * The shape of the code the closing note quotes (issue 23): the line counts of the SessionDO facade and the run
 * engine, and the longest function in src/runs and src/sessions — measured by scripts/house-check.mjs (the same
 * figures `npm run house` prints and test/build/house.test.ts holds). Times nothing.
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { projectRoot } from "./support/devserver";

interface HouseFigures {
  facadeLines: number;
  engineLines: number;
  longest: { file: string; line: number; name: string; lines: number }[];
}

export async function run(_quick: boolean) {
  const root = projectRoot("house bench");
  // Loaded at run time from the project (it finds src/ from its own path; the bench bundle has none).
  const { measure, FACADE, ENGINE } = (await import(pathToFileURL(join(root, "scripts", "house-check.mjs")).href)) as {
    measure: () => HouseFigures;
    FACADE: string;
    ENGINE: string;
  };
  const m = measure();
  const top = m.longest[0];
  return {
    [`${FACADE}_lines`]: m.facadeLines,
    [`${ENGINE}_lines`]: m.engineLines,
    longest_function: top ? { name: top.name, where: `${top.file}:${top.line}`, lines: top.lines } : null,
  };
}
