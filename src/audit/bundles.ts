/**
 * Run bundles (DESIGN §4, S3 §5 `artifact_path`): everything about one finished run in ONE create-only object,
 * `agents/{agentId}/runs/{run_id}/bundle.jsonl` in the AUDIT bucket, one JSON record per line, each
 * `{"part": …, "data": …}`, in this order:
 *   run       the run as GET /v1/runs shows it (status, output, provider, model, tool results) — one line
 *   manifest  the hash-only prompt manifest of each turn (a refused one included)
 *   event     the S3 §2 lifecycle events, by seq
 *   trace     the S4 §6 trace events
 *   tool      each tool call's S3 §1 request and response envelopes (the tool artifacts)
 * One object rather than a file per part: a bundle is there whole or not at all (no partial bundle after a
 * crash between writes), and it costs one R2 write per run instead of five (issue 12). Evidence files the
 * S5 `verify` tool copies go beside it, under `{artifact_path}/evidence/`.
 * Everything in it was redacted when it was stored; it is redacted once more on the way out.
 */
import { runArtifactPath } from "../runs/view";
import { redactJson } from "../security/redact";

export interface BundleSource {
  view: { id: string; agent_id: string };
  events: unknown[];
  trace: unknown[];
  manifests: unknown[];
  toolCalls: unknown[];
}

/** The bundle's object name under the run's `artifact_path`. */
export const BUNDLE_OBJECT = "bundle.jsonl";
/** The parts of a bundle, in the order its lines come. */
export const BUNDLE_PARTS = ["run", "manifest", "event", "trace", "tool"] as const;
export type BundlePart = (typeof BUNDLE_PARTS)[number];

/** The bundle's text: one `{"part","data"}` line per record, parts in BUNDLE_PARTS order. */
export function bundleBody(run: BundleSource, secrets: readonly string[]): string {
  const clean = (v: unknown) => redactJson(v, secrets).value;
  const lines: string[] = [JSON.stringify({ part: "run", data: clean(run.view) })];
  const add = (part: BundlePart, items: readonly unknown[]) => {
    for (const item of items) lines.push(JSON.stringify({ part, data: clean(item) }));
  };
  add("manifest", run.manifests);
  add("event", run.events);
  add("trace", run.trace);
  add("tool", run.toolCalls);
  return `${lines.join("\n")}\n`;
}

/** A stored bundle read back, by part (for readers and tests). */
export function parseBundle(text: string): Record<BundlePart, unknown[]> {
  const out = Object.fromEntries(BUNDLE_PARTS.map((p) => [p, [] as unknown[]])) as Record<BundlePart, unknown[]>;
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const { part, data } = JSON.parse(line) as { part: BundlePart; data: unknown };
    if (!BUNDLE_PARTS.includes(part)) throw new Error(`unknown bundle part ${JSON.stringify(part)}`);
    out[part].push(data);
  }
  return out;
}

export async function writeRunBundle(bucket: R2Bucket, run: BundleSource, secrets: readonly string[]): Promise<void> {
  const key = `${runArtifactPath(run.view.agent_id, run.view.id)}/${BUNDLE_OBJECT}`;
  // Create-only. An object already there is an earlier attempt whose answer was lost: the run had ended then,
  // so it holds the same records, and the bundle is done.
  await bucket.put(key, bundleBody(run, secrets), {
    onlyIf: { etagDoesNotMatch: "*" },
    httpMetadata: { contentType: "application/x-ndjson" },
  });
}
