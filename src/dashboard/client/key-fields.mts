/**
 * The fields an API key's create and edit forms share (issue 25 §3, D-080): label, the agents it may use ("all
 * agents", or a checkbox per configured agent), an optional expiry and optional limits. The agents offered are the
 * config in force's; a key that names one no longer configured still shows it (checked), so an edit keeps it
 * unless the operator unticks it.
 */
import { h } from "./dom.mts";

/** An API key record's editable part, as GET /api/admin/keys answers it. */
export interface KeyLimits {
  requestsPerMinute?: number;
  tokensPerDay?: number;
}

/** What the shared fields read: the body fields of POST and PATCH /api/admin/keys. */
export interface KeyFieldValues {
  label: string;
  agents: "all" | string[];
  /** ISO 8601 (UTC), or null for none. */
  expires_at: string | null;
  limits: KeyLimits;
}

/** A labelled form field. */
export function field(label: string, control: HTMLElement, cls = ""): HTMLElement {
  return h("label", { class: `field ${cls}`.trim() }, h("span", {}, label), control);
}

/** An ISO time as the `datetime-local` value of the browser's time zone (seconds kept). */
export function localInputValue(iso: string | null): string {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A positive whole number typed into a field, or undefined when it is empty (the gateway judges the rest). */
function count(input: HTMLInputElement): number | undefined {
  const v = input.value.trim();
  return v === "" ? undefined : Number(v);
}

/** The shared fields, named `<prefix>-label` …; `read()` gives the body values, `set()` fills them from a record. */
export function keyFields(prefix: string, agentIds: readonly string[]) {
  const label = h("input", { id: `${prefix}-label`, name: "label", autocomplete: "off", maxlength: 200 });
  const all = h("input", { type: "checkbox", name: "agents_all", value: "all", checked: true });
  const agentBox = h(
    "fieldset",
    { class: `agents ${prefix}-agents` },
    h("legend", {}, "agents"),
    h("label", { class: "check" }, all, " all agents"),
  );
  const boxes = new Map<string, HTMLInputElement>();
  const addAgent = (id: string) => {
    if (boxes.has(id)) return;
    const box = h("input", { type: "checkbox", name: "agents", value: id });
    box.addEventListener("change", () => {
      if (box.checked) all.checked = false;
    });
    boxes.set(id, box);
    agentBox.append(h("label", { class: "check" }, box, " ", h("code", {}, id)));
  };
  for (const id of agentIds) addAgent(id);
  all.addEventListener("change", () => {
    if (all.checked) for (const b of boxes.values()) b.checked = false;
  });
  const expires = h("input", { id: `${prefix}-expires`, name: "expires_at", type: "datetime-local", step: 1 });
  const rpm = h("input", { id: `${prefix}-rpm`, name: "requests_per_minute", type: "number", min: 1, step: 1, inputmode: "numeric" });
  const tpd = h("input", { id: `${prefix}-tpd`, name: "tokens_per_day", type: "number", min: 1, step: 1, inputmode: "numeric" });

  return {
    label,
    elements: [
      agentBox,
      field("expires (optional, local time)", expires, "expires"),
      field("requests / minute", rpm, "limit"),
      field("tokens / day", tpd, "limit"),
    ],
    read(): KeyFieldValues {
      const picked = [...boxes].filter(([, b]) => b.checked).map(([id]) => id);
      const limits: KeyLimits = {};
      const r = count(rpm);
      const t = count(tpd);
      if (r !== undefined) limits.requestsPerMinute = r;
      if (t !== undefined) limits.tokensPerDay = t;
      return {
        label: label.value.trim(),
        // Nothing ticked means every agent: the gateway has no "no agents" key.
        agents: all.checked || picked.length === 0 ? "all" : picked,
        expires_at: expires.value ? new Date(expires.value).toISOString() : null,
        limits,
      };
    },
    set(v: KeyFieldValues): void {
      label.value = v.label;
      if (v.agents !== "all") for (const id of v.agents) addAgent(id);
      all.checked = v.agents === "all";
      for (const [id, b] of boxes) b.checked = v.agents !== "all" && v.agents.includes(id);
      expires.value = localInputValue(v.expires_at);
      rpm.value = v.limits.requestsPerMinute === undefined ? "" : String(v.limits.requestsPerMinute);
      tpd.value = v.limits.tokensPerDay === undefined ? "" : String(v.limits.tokensPerDay);
    },
  };
}
