/**
 * Issue 33: the adversarial corpus is the project's own, committed before the guard was tuned against it, and pinned.
 * Its SHA-256 is fixed here; the generator must still produce exactly those bytes; and every family's own inverse
 * reads the whole hidden text back from an unguarded release (so "0 released" later means the guard held, not that
 * the measure went blind).
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { corpus } from "../fixtures/disclosure/make-adversarial-corpus.ts";
import { type CorpusReply, type CorpusSpread, countedSequences, releasedSequences } from "../support/disclosure-corpus.ts";
import { FAMILIES } from "../support/disguise-families.ts";

const file = join(import.meta.dirname, "..", "fixtures", "disclosure", "adversarial-corpus.json");
/** The benign answers (184, eight kinds) the false-refusal rate is measured on, pinned the same way. */
const BENIGN_SHA256 = "4df9ffbcc46939b82c34ac5a3e27e819ea977e3515a9a9178a8a076c0f722f55";
/** Pinned when the corpus was committed, before the guard of issue 33 was written. */
const PINNED_SHA256 = "ce1720a2f3745e671c9986dc9ad9f43b191a7c312207ec5fc1fa8c1b5debea4c";

describe("ISSUE33 the adversarial corpus", () => {
  const bytes = readFileSync(file);
  const doc = JSON.parse(bytes.toString("utf8")) as { replies: CorpusReply[]; spreads: CorpusSpread[] };

  it("ISSUE33 corpus pinned: its SHA-256 is the one committed before tuning, and the generator reproduces it byte for byte", () => {
    expect(createHash("sha256").update(bytes).digest("hex")).toBe(PINNED_SHA256);
    expect(corpus()).toBe(bytes.toString("utf8"));
  });

  it("ISSUE33 benign answers pinned: written before the guard was tuned, 184 answers of 8 kinds", () => {
    const benign = readFileSync(join(import.meta.dirname, "..", "fixtures", "disclosure", "benign-answers-adaptive.json"));
    expect(createHash("sha256").update(benign).digest("hex")).toBe(BENIGN_SHA256);
    const answers = (JSON.parse(benign.toString("utf8")) as { answers: { kind: string }[] }).answers;
    expect(answers.length).toBe(184);
    expect(new Set(answers.map((a) => a.kind)).size).toBe(8);
  });

  it(`ISSUE33 corpus size: at least 30 disguise families (${FAMILIES.length}), each on two hidden layers, and 10 run/session spreads`, () => {
    expect(FAMILIES.length).toBeGreaterThanOrEqual(30);
    expect(new Set(doc.replies.map((r) => r.family)).size).toBe(FAMILIES.length);
    expect(doc.replies.length).toBe(FAMILIES.length * 2);
    expect(doc.spreads.length).toBe(10);
  });

  it("ISSUE33 the measure sees an unguarded leak: each family's reply, released whole, gives away every counted sequence of its layer", () => {
    const sources = {
      base: doc.replies.find((r) => r.id === "plain@base")?.text ?? "",
      api_client: doc.replies.find((r) => r.id === "plain@api_client")?.text ?? "",
    };
    const short: Record<string, number> = {};
    for (const reply of doc.replies) {
      const counted = countedSequences([sources[reply.layer as keyof typeof sources]]);
      const got = releasedSequences(reply.text, counted).length;
      if (got < counted.size) short[reply.id] = counted.size - got;
    }
    expect(short).toEqual({});
  });
});
