/**
 * The repository stands alone (issue 22): the contracts (S1–S5) and DESIGN are not in it, so every section a code
 * comment, test or doc cites — `S1 §3.3`, `S5 §6.2`, `DESIGN §4`, and named sections such as `DESIGN "Approvals"`
 * or `S5 "Gateway Callback Contract"` — must have its own heading in docs/contracts.md, which says in the project's
 * words what the clause requires, where it is implemented and which test proves it. This test keeps that true:
 * a new citation without a heading fails here, and so does a file path or test name in contracts.md that no
 * longer exists (when modules or tests move, the doc moves with them).
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const contractsPath = join(root, "docs", "contracts.md");
const contracts = readFileSync(contractsPath, "utf8");

// One reference: a numbered section (`§3.3`, `§ 4`), an S5 section named after § (`§Gateway Callback Contract`),
// or a quoted section name that starts with a capital (`"Approvals"`, `'Tool calls'`); a quoted phrase that starts
// in lower case is a quotation of the text, not a section name.
const REF = String.raw`(?:§ ?\d+(?:\.\d+)*|§[A-Z][a-z]+(?: [A-Z][a-z]+)*|"[A-Z][^"\n]{0,60}"|'[A-Z][^'\n]{0,40}'|“[A-Z][^”\n]{0,60}”)`;
// A short parenthetical after a reference: `§5.1 (session keys), §5.5 (streaming)`.
const PAREN = String.raw`(?: \([^()]{0,40}\))?`;
// What joins the references of one document: `S1 §3.2, §3.3`, `S1 §1.5/§5.3`, `S1 §4.2 / §4.5`, `DESIGN §2 "Auth"`.
const SEP = "(?:, |; |/| / | and |, and )";
const RUN = new RegExp(
  String.raw`\b(S[1-5]|DESIGN) (${REF}${PAREN}(?:${SEP}(?=§)${REF}${PAREN}|(?:, | )(?=["'“][A-Z])${REF}${PAREN})*)`,
  "g",
);
const ONE = new RegExp(REF, "g");

/** A reference as contracts.md spells its heading: `S1 §3.3` or `DESIGN "Approvals"`. */
function key(doc: string, ref: string): string {
  if (/^§ ?\d/.test(ref)) return `${doc} §${ref.replace(/^§ ?/, "")}`;
  return `${doc} "${ref.replace(/^§/, "").replace(/^["'“]|["'”]$/g, "")}"`;
}

/**
 * Every section cited in a text; comment continuations are joined first, so a citation may wrap a line. A quoted
 * name right after a numbered section (`S3 §5 "Dashboard Admin APIs"`) is a part of that section, except in
 * DESIGN, whose §2 rows are sections of their own (`DESIGN §2 "Auth"`).
 */
function citations(text: string): string[] {
  const joined = text.replace(/\r?\n[ \t]*(?:\*(?!\/)|\/\/|#)?[ \t]*/g, " ");
  const out: string[] = [];
  for (const run of joined.matchAll(RUN)) {
    const doc = run[1] ?? "";
    const refs = run[2] ?? "";
    for (const ref of refs.matchAll(ONE)) {
      const partOfSection = !ref[0].startsWith("§") && ref.index > 0 && !/[,;] $/.test(refs.slice(0, ref.index));
      if (partOfSection && doc !== "DESIGN") continue;
      out.push(key(doc, ref[0]));
    }
  }
  return out;
}

function walk(dir: string, acc: string[] = []): string[] {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (entry === "node_modules" || entry === "generated" || entry === "fixtures") continue;
    if (statSync(path).isDirectory()) walk(path, acc);
    else if (/\.(ts|tsx|mjs|js|md|css|html)$/.test(entry)) acc.push(path);
  }
  return acc;
}

/** Files whose citations must resolve: the code, the scripts, the tests and the docs other than contracts.md. */
function citingFiles(): string[] {
  const docs = readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md") && f !== "contracts.md")
    .map((f) => join(root, "docs", f));
  return [...["src", "scripts", "test"].flatMap((d) => walk(join(root, d))), ...docs, join(root, "README.md")];
}

/** The headings of contracts.md that name a section, and their names. */
const HEADING = /^#{2,4} ((?:S[1-5]|DESIGN) (?:§\d+(?:\.\d+)*|"[^"]+"))(?= — |$)/gm;
const headings = [...contracts.matchAll(HEADING)].map((m) => m[1] ?? "");

/** A cited name resolves to a heading of that name, or to one whose name it begins (`"Retrieved memory"`). */
function resolves(cited: string): boolean {
  if (headings.includes(cited)) return true;
  const named = /^(\S+) "(.+)"$/.exec(cited);
  if (!named) return false;
  const [, doc, name] = named;
  return headings.some((h) => h.startsWith(`${doc} "${name},`) || h.startsWith(`${doc} "${name} `));
}

describe("docs/contracts.md explains every cited contract section", () => {
  it("the citation reader finds lists, ranges of forms and wrapped lines", () => {
    expect(citations('(S1 §3.2, §3.3; DESIGN "Approvals", "Capabilities")')).toEqual([
      "S1 §3.2",
      "S1 §3.3",
      'DESIGN "Approvals"',
      'DESIGN "Capabilities"',
    ]);
    expect(citations('S5 §Gateway Callback\n * Contract, §6.3; DESIGN §2 "Auth", §3')).toEqual([
      'S5 "Gateway Callback Contract"',
      "S5 §6.3",
      "DESIGN §2",
      'DESIGN "Auth"',
      "DESIGN §3",
    ]);
    expect(citations('S1 §2.4 (channel policies), §5.1 (session keys) and S3 §4 "missed windows are not replayed"')).toEqual([
      "S1 §2.4",
      "S1 §5.1",
      "S3 §4",
    ]);
    expect(citations("S3's shape, issue 20 §5, S1 §1.5/§5.3, S1 §4.2 / §4.5")).toEqual(["S1 §1.5", "S1 §5.3", "S1 §4.2", "S1 §4.5"]);
    expect(citations('S3 §5 "Dashboard Admin APIs", S1 §1.2 "No secrets in config"')).toEqual(["S3 §5", "S1 §1.2"]);
  });

  it("contracts.md has a heading for every section cited in src/, scripts/, test/, docs/ and README.md", () => {
    const missing = new Map<string, Set<string>>();
    let seen = 0;
    for (const file of citingFiles()) {
      for (const cited of citations(readFileSync(file, "utf8"))) {
        seen++;
        if (resolves(cited)) continue;
        const files = missing.get(cited) ?? new Set<string>();
        files.add(relative(root, file));
        missing.set(cited, files);
      }
    }
    expect(seen).toBeGreaterThan(100);
    const report = [...missing].map(([cited, files]) => `${cited} (cited in ${[...files].join(", ")})`);
    expect(report, "add a heading for each to docs/contracts.md").toEqual([]);
  });

  it("every heading is unique, so its anchor is stable", () => {
    const dupes = headings.filter((h, i) => headings.indexOf(h) !== i);
    expect(dupes).toEqual([]);
    expect(headings.length).toBeGreaterThan(80);
  });

  it("every file path named in contracts.md exists", () => {
    const paths = new Set(
      [...contracts.matchAll(/`((?:src|test|scripts|docs|migrations|config|prompts|bench)\/[^`\s*]+)`/g)].map((m) => m[1] ?? ""),
    );
    expect(paths.size).toBeGreaterThan(50);
    const gone = [...paths].filter((p) => !existsSync(join(root, p)));
    expect(gone, "contracts.md names files that do not exist (moved? update the doc)").toEqual([]);
  });

  it('every test named in contracts.md (`file` › "title") is a test title in that file', () => {
    const named = [...contracts.matchAll(/`(test\/[^`]+\.test\.ts)` › "([^"]+)"/g)];
    expect(named.length).toBeGreaterThan(80);
    const wrong: string[] = [];
    for (const [, file = "", title = ""] of named) {
      const path = join(root, file);
      const prefix = title.replace(/…$/, "");
      if (!existsSync(path) || !readFileSync(path, "utf8").includes(prefix)) wrong.push(`${file} › "${title}"`);
    }
    expect(wrong, "contracts.md names tests that are not there (renamed or moved? update the doc)").toEqual([]);
  });
});

describe("test/README.md lists every test file", () => {
  it("one line per file under test/ that ends in .test.ts, and no line for a file that is gone", () => {
    const catalogue = readFileSync(join(root, "test", "README.md"), "utf8");
    const listed = [...catalogue.matchAll(/^- `(test\/[^`]+\.test\.ts)`/gm)].map((m) => m[1] ?? "");
    const files = walk(join(root, "test"))
      .filter((f) => f.endsWith(".test.ts"))
      .map((f) => relative(root, f));
    expect(
      listed.filter((f, i) => listed.indexOf(f) !== i),
      "listed twice",
    ).toEqual([]);
    expect(
      files.filter((f) => !listed.includes(f)),
      "add a line to test/README.md",
    ).toEqual([]);
    expect(
      listed.filter((f) => !files.includes(f)),
      "remove or move the line in test/README.md",
    ).toEqual([]);
  });
});
