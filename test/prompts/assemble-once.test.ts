/**
 * Issue 23, "the prompt assembled once per round": a round builds L1–L5 once (`assembleSystemLayers`), learns
 * its fixed cost from them (`estimateFixedTokens`), fits the history, and completes the stack (`completeStack`).
 * The result must be exactly what one whole assembly gives, and the fixed cost exactly what the earlier
 * "assemble without history, then estimate" gave — for every shape of stack a run can build.
 */
import { describe, expect, it } from "vitest";
import {
  type AssemblyInput,
  assemblePromptStack,
  assembleSystemLayers,
  completeStack,
  estimateFixedTokens,
  estimatePromptTokens,
} from "../../src/prompts/assemble";

const base: AssemblyInput = { agentId: "main", channel: "api_client", toolPolicy: "native", userMessage: "Summarise today's deploys." };
const history = [
  { role: "user" as const, content: "What changed yesterday?" },
  { role: "assistant" as const, content: "Two deploys of the billing service." },
];
const shapes: [string, AssemblyInput][] = [
  ["plain", base],
  [
    "markers with a catalog",
    { ...base, toolPolicy: "markers", toolCatalog: [{ name: "fs.list_dir", description: "List", parameters: { type: "object" } }] },
  ],
  ["inline role, recovery and automation", { ...base, inlineRole: "You are the release bot.", recovery: true, task: "automation" }],
  [
    "L6 contexts",
    {
      ...base,
      l6Context: [
        { kind: "env_available", text: "DEMO_API_KEY" },
        { kind: "retrieved_memory", text: "likes tea", ids: ["m1"] },
      ],
    },
  ],
];

describe("ISSUE23 the prompt is assembled once per round", () => {
  for (const [name, input] of shapes) {
    it(`ISSUE23 ${name}: completeStack(assembleSystemLayers) equals assemblePromptStack, history and summaries included`, async () => {
      const summaries = [{ kind: "compaction_summary" as const, text: "Earlier: set up the repo." }];
      const whole = await assemblePromptStack({ ...input, history, l6Context: [...(input.l6Context ?? []), ...summaries] });
      const split = await completeStack(await assembleSystemLayers(input), {
        history,
        l6Context: [...(input.l6Context ?? []), ...summaries],
      });
      expect(split).toEqual(whole);
      expect(split.manifest.stack_sha256).toBe(whole.manifest.stack_sha256);
    });

    it(`ISSUE23 ${name}: estimateFixedTokens equals the estimate of the stack assembled without history`, async () => {
      const system = await assembleSystemLayers(input);
      expect(estimateFixedTokens(system, input.l6Context ?? [])).toBe(estimatePromptTokens(await assemblePromptStack(input)));
    });
  }
});
