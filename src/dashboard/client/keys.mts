/**
 * Keys (issue 25 §3, D-080): the API key records, newest first and paged; a form creates one (caller, label, the
 * agents it may use, optional expiry and limits) and the key is shown once (key-once.mts); each live key can be
 * edited (label, agents, expiry, limits: PATCH), rotated (a new key, shown once the same way) or revoked, each
 * after a confirm. The list never carries a key: the gateway returns only its prefix.
 */
import { ADMIN_API } from "../api-routes.ts";
import { h, time } from "./dom.mts";
import { field, type KeyFieldValues, type KeyLimits, keyFields } from "./key-fields.mts";
import { onceSlot } from "./key-once.mts";
import { heading, Pager, type ViewContext, type ViewFactory } from "./view.mts";

/** A record of GET /api/admin/keys (ApiKey). */
interface KeyRecord {
  key_id: string;
  caller_id: string;
  label: string;
  agents: "all" | string[];
  prefix: string;
  created_at: string;
  rotated_at: string | null;
  last_used_at: string | null;
  expires_at: string | null;
  revoked_at: string | null;
  limits: KeyLimits;
}

/** `active`, `revoked` or `expired` (now, in this browser's clock). */
export function keyStatus(k: KeyRecord, now = Date.now()): "active" | "revoked" | "expired" {
  if (k.revoked_at) return "revoked";
  if (k.expires_at && Date.parse(k.expires_at) <= now) return "expired";
  return "active";
}

/** A key's limits in words: `60 req/min · 10000 tokens/day`, or `none`. */
export function limitsText(l: KeyLimits): string {
  const parts = [
    l.requestsPerMinute === undefined ? null : `${l.requestsPerMinute} req/min`,
    l.tokensPerDay === undefined ? null : `${l.tokensPerDay} tokens/day`,
  ].filter((p) => p !== null);
  return parts.length > 0 ? parts.join(" · ") : "none";
}

const COLUMNS = ["key", "caller", "label", "agents", "limits", "created", "last used", "expires", "status", ""];

/** The agent ids of the config in force (for the agents checkboxes); [] when it cannot be read (the error shows). */
async function configuredAgents(ctx: ViewContext): Promise<string[]> {
  try {
    const res = await ctx.call<{ agents?: Record<string, unknown> }>(ADMIN_API.config);
    return Object.keys(res.body.agents ?? {}).sort();
  } catch (err) {
    if (ctx.alive()) ctx.fail(err);
    return [];
  }
}

export const keysView: ViewFactory = (ctx) => {
  const once = onceSlot();
  const head = h("thead", {}, h("tr", {}, ...COLUMNS.map((c) => h("th", { scope: "col" }, c))));
  const body = h("tbody");
  const keysTable = h("table", { id: "keys-table", class: "cards" }, head, body);
  const empty = h("p", { id: "keys-empty", class: "muted", hidden: true }, "No API keys yet.");
  const rows = new Map<string, HTMLTableRowElement>();
  const createSlot = h("div");
  const editSlot = h("div");

  function cells(k: KeyRecord): HTMLTableCellElement[] {
    const status = keyStatus(k);
    const td = (label: string, cls: string, ...content: (Node | string)[]) => h("td", { class: cls, "data-label": label }, ...content);
    const actions = td("", "actions");
    if (status !== "revoked") {
      for (const [action, text] of [
        ["edit", "Edit"],
        ["rotate", "Rotate"],
        ["revoke", "Revoke"],
      ] as const) {
        const b = h("button", { type: "button", "data-action": action, class: action === "revoke" ? "danger" : null }, text);
        b.addEventListener("click", () => void act(action, k, b));
        actions.append(b);
      }
    }
    return [
      td("key", "key-id", h("code", { title: k.prefix }, k.key_id)),
      td("caller", "caller", k.caller_id),
      td("label", "label", k.label),
      td("agents", "agents", k.agents === "all" ? "all" : k.agents.join(", ")),
      td("limits", "limits", limitsText(k.limits)),
      td("created", "created", time(k.created_at)),
      td("last used", "last-used", time(k.last_used_at)),
      td("expires", "expires", time(k.expires_at)),
      h("td", { class: "status", "data-label": "status", "data-status": status }, status),
      actions,
    ];
  }

  /** Puts a record's row in place (or at the top when `prepend`, for a new key). */
  function upsert(k: KeyRecord, prepend = false): void {
    const tr = h("tr", { "data-key-id": k.key_id, "data-key-status": keyStatus(k) }, ...cells(k));
    const existing = rows.get(k.key_id);
    rows.set(k.key_id, tr);
    if (existing) existing.replaceWith(tr);
    else if (prepend) body.prepend(tr);
    else body.append(tr);
    empty.hidden = rows.size > 0;
  }

  async function act(action: "edit" | "rotate" | "revoke", k: KeyRecord, button: HTMLButtonElement): Promise<void> {
    if (action === "edit") return openEdit(k);
    const question =
      action === "rotate"
        ? `Rotate key ${k.key_id} (${k.label})? The current key stops working at once; the new one is shown once.`
        : `Revoke key ${k.key_id} (${k.label})? It stops working at once and cannot be restored.`;
    if (!confirm(question)) return;
    ctx.clearError();
    button.disabled = true;
    try {
      const route = action === "rotate" ? ADMIN_API.rotateKey : ADMIN_API.revokeKey;
      const res = await ctx.call<KeyRecord & { key?: string }>(route, { params: { key_id: k.key_id } });
      if (!ctx.alive()) return;
      const { key, ...record } = res.body;
      upsert(record);
      if (action === "rotate" && key) once.show(record.key_id, key, "Rotated");
      if (action === "revoke" && editSlot.getAttribute("data-key-id") === k.key_id) closeEdit();
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
      button.disabled = false;
    }
  }

  function closeEdit(): void {
    editSlot.replaceChildren();
    editSlot.removeAttribute("data-key-id");
  }

  function openEdit(k: KeyRecord): void {
    ctx.clearError();
    const fields = keyFields("key-edit", agentIds);
    const current: KeyFieldValues = { label: k.label, agents: k.agents, expires_at: k.expires_at, limits: k.limits };
    fields.set(current);
    const save = h("button", { type: "submit" }, "Save");
    const cancel = h("button", { type: "button", "data-action": "cancel" }, "Cancel");
    cancel.addEventListener("click", closeEdit);
    const form = h(
      "form",
      { id: "key-edit", class: "grid key-form", "data-key-id": k.key_id },
      h("h3", {}, "Edit key ", h("code", {}, k.key_id), ` (${k.caller_id})`),
      field("label", fields.label),
      ...fields.elements,
      h("div", { class: "actions" }, save, cancel),
    );
    const initialExpiry = fields.read().expires_at;
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      ctx.clearError();
      const v = fields.read();
      // The expiry goes only when it changed: an expired key's old expiry would be refused as not in the future.
      const patch = {
        label: v.label,
        agents: v.agents,
        limits: v.limits,
        ...(v.expires_at !== initialExpiry ? { expires_at: v.expires_at } : {}),
      };
      save.disabled = true;
      try {
        const res = await ctx.call<KeyRecord>(ADMIN_API.updateKey, { params: { key_id: k.key_id }, body: patch });
        if (!ctx.alive()) return;
        upsert(res.body);
        closeEdit();
      } catch (err) {
        if (ctx.alive()) ctx.fail(err);
      } finally {
        save.disabled = false;
      }
    });
    editSlot.setAttribute("data-key-id", k.key_id);
    editSlot.replaceChildren(form);
    form.scrollIntoView({ block: "nearest" });
  }

  function createForm(): HTMLFormElement {
    const caller = h("input", { id: "key-caller", name: "caller_id", autocomplete: "off", placeholder: "acme-app" });
    const fields = keyFields("key-create", agentIds);
    fields.label.placeholder = "production backend";
    const submit = h("button", { id: "key-submit", type: "submit" }, "Create key");
    const form = h(
      "form",
      { id: "key-create", class: "grid key-form", autocomplete: "off" },
      field("caller id", caller),
      field("label", fields.label),
      ...fields.elements,
      h("div", { class: "actions" }, submit),
    );
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      ctx.clearError();
      once.clear();
      const { expires_at, limits, ...v } = fields.read();
      const req = {
        caller_id: caller.value.trim(),
        ...v,
        ...(expires_at ? { expires_at } : {}),
        ...(Object.keys(limits).length > 0 ? { limits } : {}),
      };
      submit.disabled = true;
      try {
        const res = await ctx.call<KeyRecord & { key: string }>(ADMIN_API.createKey, { body: req });
        if (!ctx.alive()) return;
        const { key, ...record } = res.body;
        upsert(record, true);
        once.show(record.key_id, key, "New");
        form.reset();
      } catch (err) {
        if (ctx.alive()) ctx.fail(err);
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  const pager = new Pager<KeyRecord>(
    ctx,
    ADMIN_API.keys,
    "keys",
    () => ({}),
    (keys, first) => {
      if (first) {
        body.replaceChildren();
        rows.clear();
      }
      for (const k of keys) upsert(k);
      empty.hidden = rows.size > 0;
    },
  );

  let agentIds: string[] = [];
  ctx.root.append(
    // Refresh keeps a key still shown: only Dismiss or leaving the view takes it away.
    heading("API keys", () => {
      closeEdit();
      void pager.first();
    }),
    h(
      "p",
      { class: "muted" },
      "Keys act as their caller on /v1 and the OpenAI routes, for the agents they name. A key is shown once, when it is created or rotated; the gateway keeps only a salted hash.",
    ),
    createSlot,
    once.el,
    editSlot,
    h("div", { class: "table-scroll keys" }, keysTable),
    empty,
    pager.button,
  );
  void (async () => {
    agentIds = await configuredAgents(ctx);
    if (ctx.alive()) createSlot.replaceChildren(createForm());
  })();
  void pager.first();
  return undefined;
};
