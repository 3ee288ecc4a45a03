/**
 * A run as `GET /v1/runs/{run_id}` answers it — S3 §5's shape, field for field:
 * `id, agent_id, source, status, output, artifact_path, duration_ms,
 * tool_calls, provider, model, trace.tool_execution_results[]`.
 */
import type { RunCompletion } from "./completion";
import { parseSpec, type RunRow, type ToolExecutionRow } from "./store";

export interface ToolExecutionResult {
  tool: string;
  tool_call_id: string;
  summary: string;
  /** The tool's output as JSON text ("" when it failed). */
  output: string;
  /** The error message ("" when it succeeded). */
  error: string;
}

export interface RunView {
  id: string;
  agent_id: string;
  source: string;
  status: string;
  output: string;
  artifact_path: string;
  duration_ms: number;
  tool_calls: number;
  provider: string;
  model: string;
  trace: { tool_execution_results: ToolExecutionResult[] };
  /** Issue 21 §1: the automation completion; `missing` for a finished job run that recorded none. */
  completion?: RunCompletion;
}

/** Where the run's bundle lives in the AUDIT bucket (DESIGN §4). */
export const runArtifactPath = (agentId: string, runId: string): string => `agents/${agentId}/runs/${runId}`;

/** The S3 §5 view of a run, with its automation completion when it has one (or is a finished job run). */
export function runView(run: RunRow, executions: readonly ToolExecutionRow[], now = Date.now(), completion?: RunCompletion): RunView {
  const spec = parseSpec(run);
  const started = run.started_at ? Date.parse(run.started_at) : null;
  const finished = run.finished_at ? Date.parse(run.finished_at) : null;
  return {
    id: run.id,
    agent_id: run.agent_id,
    source: run.source,
    status: run.status,
    output: run.output ?? "",
    artifact_path: runArtifactPath(run.agent_id, run.id),
    duration_ms: started === null ? 0 : Math.max(0, (finished ?? now) - started),
    tool_calls: run.tool_calls,
    provider: spec?.model.providerId ?? "",
    model: spec?.model.modelId ?? "",
    trace: {
      tool_execution_results: executions
        .filter((e) => e.status === "done")
        .map((e) => ({
          tool: e.tool,
          tool_call_id: e.tool_call_id,
          summary: e.summary ?? "",
          output: e.ok === 1 ? (e.output ?? "") : "",
          error: e.error ? (JSON.parse(e.error) as { message: string }).message : "",
        })),
    },
    ...(completion ? { completion } : {}),
  };
}
