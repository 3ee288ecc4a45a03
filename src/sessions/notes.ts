/**
 * Checkpoint state (S4 §1) and the structured NOTES patch protocol (S4 §2).
 *
 * The model may end a reply with
 *   <<<NOTES_JSON>>> {"set_goals": […], "actions": ["condense_now"]} <<<END_NOTES_JSON>>>
 * The block is always stripped from what users see. A valid patch is applied
 * (absent keys = no change), then its actions run; everything is traced.
 * Malformed NOTES never break the turn: they are stripped and traced.
 * `request_permission:<cap>` adds to `capabilities_pending` unless granted;
 * a model's `grant_permission:<cap>` is refused and traced — only an admin
 * grants (DESIGN "Capabilities", S1 §0 fail-closed).
 */
import { z } from "zod";

const Item = z.string().min(1).max(500);
const Items = z.array(Item).max(50);

/** S4 §1.1 State. */
export const State = z.strictObject({
  goals: z.array(z.string()),
  open_loops: z.array(z.string()),
  decisions: z.array(z.string()),
  constraints: z.array(z.string()),
  episode_summary: z.string(),
  memory_tags: z.array(z.string()),
  memory_refs: z.array(z.string()),
  capabilities_granted: z.array(z.string()),
  capabilities_pending: z.array(z.string()),
});
export type State = z.infer<typeof State>;

export const EMPTY_STATE: State = {
  goals: [],
  open_loops: [],
  decisions: [],
  constraints: [],
  episode_summary: "",
  memory_tags: [],
  memory_refs: [],
  capabilities_granted: [],
  capabilities_pending: [],
};

/** S4 §2 patch payload. Unknown keys are dropped (and traced), not fatal. */
export const NotesPatch = z.object({
  set_goals: Items.optional(),
  add_open_loops: Items.optional(),
  close_open_loops: Items.optional(),
  add_decisions: Items.optional(),
  add_constraints: Items.optional(),
  set_episode_summary: z.string().max(4000).optional(),
  add_memory_tags: Items.optional(),
  actions: z.array(z.string().max(300)).max(20).optional(),
});
export type NotesPatch = z.infer<typeof NotesPatch>;

export const NOTES_BEGIN = "<<<NOTES_JSON>>>";
export const NOTES_END = "<<<END_NOTES_JSON>>>";

/** Longest a state list may grow; the oldest entries go first. */
export const MAX_LIST = 100;

export type NotesTrace =
  | { kind: "notes_patch"; data: { applied: string[]; ignored_keys: string[] } }
  | { kind: "notes_patch"; data: { error: string } }
  | {
      kind: "actions";
      data: {
        action: string;
        outcome: "compaction_requested" | "capability_requested" | "already_granted" | "already_pending" | "refused" | "ignored_unknown";
      };
    };

export interface Extracted {
  /** The reply with every NOTES block (and a dangling begin marker's tail) removed. */
  visible: string;
  patch: NotesPatch | null;
  traces: NotesTrace[];
}

/** Finds, strips and validates the NOTES block of an assistant reply. */
export function extractNotes(reply: string): Extracted {
  const traces: NotesTrace[] = [];
  let visible = "";
  let rest = reply;
  let payload: string | null = null;
  for (;;) {
    const start = rest.indexOf(NOTES_BEGIN);
    if (start < 0) {
      visible += rest;
      break;
    }
    visible += rest.slice(0, start);
    const end = rest.indexOf(NOTES_END, start + NOTES_BEGIN.length);
    if (end < 0) {
      // Unterminated: hide everything after the marker; never show a half block.
      traces.push({ kind: "notes_patch", data: { error: "unterminated NOTES block" } });
      break;
    }
    if (payload === null) payload = rest.slice(start + NOTES_BEGIN.length, end);
    else traces.push({ kind: "notes_patch", data: { error: "more than one NOTES block; only the first is used" } });
    rest = rest.slice(end + NOTES_END.length);
  }
  visible = visible.replace(/\n{3,}/g, "\n\n").trim();
  if (payload === null) return { visible, patch: null, traces };

  let json: unknown;
  try {
    json = JSON.parse(payload);
  } catch {
    traces.push({ kind: "notes_patch", data: { error: "NOTES payload is not valid JSON" } });
    return { visible, patch: null, traces };
  }
  const parsed = NotesPatch.safeParse(json);
  if (!parsed.success) {
    traces.push({ kind: "notes_patch", data: { error: `NOTES payload invalid at ${parsed.error.issues[0]?.path.join(".") || "(root)"}` } });
    return { visible, patch: null, traces };
  }
  const known = new Set(Object.keys(NotesPatch.shape));
  const ignored = Object.keys(json as object).filter((k) => !known.has(k));
  traces.push({ kind: "notes_patch", data: { applied: Object.keys(parsed.data).sort(), ignored_keys: ignored.sort() } });
  return { visible, patch: parsed.data, traces };
}

function addUnique(list: readonly string[], items: readonly string[] | undefined): string[] {
  if (!items) return [...list];
  const out = [...list];
  for (const item of items) if (!out.includes(item)) out.push(item);
  return out.slice(-MAX_LIST);
}

/** Applies a patch; absent keys leave their field unchanged. Pure. */
export function applyPatch(state: State, patch: NotesPatch): State {
  const closing = new Set(patch.close_open_loops ?? []);
  return {
    ...state,
    goals: patch.set_goals ? [...new Set(patch.set_goals)] : state.goals,
    open_loops: addUnique(state.open_loops, patch.add_open_loops).filter((l) => !closing.has(l)),
    decisions: addUnique(state.decisions, patch.add_decisions),
    constraints: addUnique(state.constraints, patch.add_constraints),
    episode_summary: patch.set_episode_summary ?? state.episode_summary,
    memory_tags: addUnique(state.memory_tags, patch.add_memory_tags),
  };
}

export interface ActionOutcome {
  state: State;
  traces: NotesTrace[];
  /** Set when the model asked for compaction. */
  compaction: "now" | "smart" | null;
}

/** Runs a patch's actions after it was applied. Pure. */
export function runActions(state: State, actions: readonly string[]): ActionOutcome {
  let next = state;
  const traces: NotesTrace[] = [];
  let compaction: ActionOutcome["compaction"] = null;
  for (const action of actions) {
    if (action === "condense_now" || action === "condense_smart") {
      compaction = action === "condense_now" ? "now" : (compaction ?? "smart");
      traces.push({ kind: "actions", data: { action, outcome: "compaction_requested" } });
    } else if (action.startsWith("request_permission:") && action.length > "request_permission:".length) {
      const cap = action.slice("request_permission:".length);
      if (next.capabilities_granted.includes(cap)) traces.push({ kind: "actions", data: { action, outcome: "already_granted" } });
      else if (next.capabilities_pending.includes(cap)) traces.push({ kind: "actions", data: { action, outcome: "already_pending" } });
      else {
        next = { ...next, capabilities_pending: [...next.capabilities_pending, cap] };
        traces.push({ kind: "actions", data: { action, outcome: "capability_requested" } });
      }
    } else if (action.startsWith("grant_permission:")) {
      traces.push({ kind: "actions", data: { action, outcome: "refused" } });
    } else {
      traces.push({ kind: "actions", data: { action, outcome: "ignored_unknown" } });
    }
  }
  return { state: next, traces, compaction };
}

/** An admin grant: adds to granted and removes from pending (S4 §1.1 constraint). */
export function grantCapability(state: State, cap: string): State {
  return {
    ...state,
    capabilities_granted: state.capabilities_granted.includes(cap) ? state.capabilities_granted : [...state.capabilities_granted, cap],
    capabilities_pending: state.capabilities_pending.filter((c) => c !== cap),
  };
}

/** An admin revocation. */
export function revokeCapability(state: State, cap: string): State {
  return { ...state, capabilities_granted: state.capabilities_granted.filter((c) => c !== cap) };
}

/** Extract, apply and act: the whole S4 §2 runtime step for one assistant reply. */
export function processAssistantNotes(
  state: State,
  reply: string,
): { visible: string; state: State; traces: NotesTrace[]; compaction: ActionOutcome["compaction"] } {
  const extracted = extractNotes(reply);
  if (!extracted.patch) return { visible: extracted.visible, state, traces: extracted.traces, compaction: null };
  const patched = applyPatch(state, extracted.patch);
  const acted = runActions(patched, extracted.patch.actions ?? []);
  return { visible: extracted.visible, state: acted.state, traces: [...extracted.traces, ...acted.traces], compaction: acted.compaction };
}
