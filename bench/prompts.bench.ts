/**
 * Prompt-stack micro-benchmark: time per turn to assemble the six-layer stack
 * with its manifest, to run the input disclosure guard, and the output guard —
 * each next to a baseline measured in the same run (one SHA-256 of the user
 * message: the least any hashed manifest must do). Bundled and run in Node by
 * bench/run.mjs; V8 is the engine workerd uses too.
 */
import { assemblePromptStack } from "../src/prompts/assemble";
import { classifyDisclosureRequest } from "../src/prompts/disclosure";
import { sha256Hex } from "../src/prompts/hash";
import { hiddenIndex } from "../src/prompts/leak-guard/hidden-index";
import { DisclosureLedger } from "../src/prompts/leak-guard/ledger";
import { checkOutput, checkRelease } from "../src/prompts/output-guard";
import { StreamGuard } from "../src/prompts/stream-guard";
import { guardArguments } from "../src/prompts/tool-args-guard";

/** A benign answer of 58 words of ordinary prose (the stream bench streams the same text, bench/stream.bench.ts). */
const BENIGN_ANSWER =
  "Start the dough the night before so the flour has time to absorb the water. In the morning, fold it gently four times, " +
  "let it rest in a warm corner for about two hours, then shape it into a tight round and bake it in a very hot oven " +
  "until the crust sounds hollow when you tap it";

interface Stat {
  median_us: number;
  p95_us: number;
  runs: number;
}

async function measure(runs: number, fn: () => Promise<unknown> | unknown): Promise<Stat> {
  for (let i = 0; i < Math.min(200, runs); i++) await fn(); // warm-up
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await fn();
    times.push((performance.now() - t0) * 1000);
  }
  times.sort((a, b) => a - b);
  const at = (q: number) => Math.round((times[Math.min(times.length - 1, Math.floor(q * times.length))] as number) * 10) / 10;
  return { median_us: at(0.5), p95_us: at(0.95), runs };
}

export async function run(quick: boolean) {
  const runs = quick ? 500 : 5000;
  const message = "Can you summarise yesterday's deploys and flag anything that failed? 请用中文回答。";
  const history = Array.from({ length: 20 }, (_, i) => ({
    role: (i % 2 ? "assistant" : "user") as "user" | "assistant",
    content: `turn ${i}: ${message}`,
  }));
  const reply = "Yesterday there were 14 deploys; 2 failed (billing-api at 14:02, search at 18:40). Both were rolled back. ".repeat(8);

  const baseline = await measure(runs, () => sha256Hex(message));
  const assembly = await measure(runs, () =>
    assemblePromptStack({ agentId: "main", channel: "telegram", toolPolicy: "native", task: "automation", history, userMessage: message }),
  );
  const inputGuard = await measure(runs, () => classifyDisclosureRequest(message));
  const outputGuard = await measure(runs, () => checkOutput(reply));
  // Issue 33: a guarded turn's guard work on a benign 60-word answer — streamed word by word (as the stream bench's
  // model sends it) and judged whole against the conversation's ledger — and a tool round's: the round's text and
  // one call's arguments through the same ledger.
  const answer = BENIGN_ANSWER;
  const streamed = await measure(Math.ceil(runs / 5), () => {
    const guard = new StreamGuard((raw) => raw);
    for (const word of answer.match(/\S+\s*/g) ?? []) guard.push(word);
  });
  const ledgerOf = () => new DisclosureLedger(hiddenIndex());
  const finalAnswer = await measure(runs, () => checkRelease(answer, ledgerOf()));
  const toolRound = await measure(runs, async () => {
    const ledger = ledgerOf();
    checkRelease("Let me look up the weather in Lisbon for you.", ledger);
    await guardArguments(JSON.stringify({ url: "https://api.example.com/weather?city=Lisbon&units=metric", timeout_ms: 5000 }), ledger);
  });
  const ratio = (s: Stat) => Math.round((s.median_us / baseline.median_us) * 10) / 10;
  return {
    baseline_sha256_of_message: baseline,
    prompt_assembly: { ...assembly, ratio_to_baseline: ratio(assembly) },
    disclosure_input_guard: { ...inputGuard, ratio_to_baseline: ratio(inputGuard) },
    disclosure_output_guard: { ...outputGuard, ratio_to_baseline: ratio(outputGuard) },
    guarded_turn: {
      answer_words: answer.split(/\s+/).length,
      stream_guard_whole_answer: streamed,
      final_answer_with_ledger: finalAnswer,
      total_median_us: Math.round((streamed.median_us + finalAnswer.median_us) * 10) / 10,
    },
    guarded_tool_round: { ...toolRound, what: "a round's text and one call's arguments judged against the conversation's ledger" },
  };
}
