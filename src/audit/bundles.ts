/**
 * Run bundles (DESIGN §4, S3 §5 `artifact_path`): everything about one finished run under
 * `agents/{agentId}/runs/{run_id}/` in the AUDIT bucket, create-only:
 *   run.json        the run as GET /v1/runs shows it (status, output, provider, model, tool results)
 *   manifests.json  the hash-only prompt manifest of each model call
 *   events.jsonl    the S3 §2 lifecycle events
 *   trace.jsonl     the S4 §6 trace events
 *   tools.jsonl     each tool call's S3 §1 request and response envelopes (the tool artifacts)
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

export const BUNDLE_FILES = ["run.json", "manifests.json", "events.jsonl", "trace.jsonl", "tools.jsonl"] as const;

const jsonl = (items: readonly unknown[]) => items.map((i) => JSON.stringify(i)).join("\n") + (items.length ? "\n" : "");

/** Writes the bundle; objects already there are left alone (a retry after a partial write completes it). */
export async function writeRunBundle(bucket: R2Bucket, run: BundleSource, secrets: readonly string[]): Promise<void> {
  const clean = <T>(v: T) => redactJson(v, secrets).value as T;
  const base = runArtifactPath(run.view.agent_id, run.view.id);
  const files: Record<(typeof BUNDLE_FILES)[number], string> = {
    "run.json": `${JSON.stringify(clean(run.view), null, 2)}\n`,
    "manifests.json": `${JSON.stringify(clean(run.manifests), null, 2)}\n`,
    "events.jsonl": jsonl(clean(run.events)),
    "trace.jsonl": jsonl(clean(run.trace)),
    "tools.jsonl": jsonl(clean(run.toolCalls)),
  };
  // The five writes are independent (each create-only; a retry completes a partial bundle): issued together,
  // so a bundle costs one R2 round trip of wall time instead of five (issue 12).
  await Promise.all(BUNDLE_FILES.map((name) => bucket.put(`${base}/${name}`, files[name], { onlyIf: { etagDoesNotMatch: "*" } })));
}
