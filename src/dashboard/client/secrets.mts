/**
 * Secrets: one-way ingestion. A value is typed into a password field, cleared from it as soon as it is read, and
 * sent once; the gateway never returns it, so this page never has it again — the list shows names and times only.
 * A provider key or bot token is bound to an origin (issue 20 §5): the optional origin field says where it may be
 * sent (default: where the configuration in force sends it), and the list shows each binding.
 */
import { ADMIN_API } from "../api-routes.ts";
import { h, time } from "./dom.mts";
import { heading, table, type ViewFactory } from "./view.mts";

interface Secret {
  name: string;
  created_at: string;
  updated_at: string;
  origin?: string;
  rotated_at?: string;
}

export const secretsView: ViewFactory = (ctx) => {
  const name = h("input", {
    id: "secret-name",
    name: "name",
    required: true,
    pattern: "[A-Z][A-Z0-9_]{0,127}",
    autocomplete: "off",
    placeholder: "MOONSHOT_API_KEY",
  });
  const value = h("input", {
    id: "secret-value",
    name: "value",
    type: "password",
    required: true,
    autocomplete: "new-password",
    spellcheck: false,
  });
  const origin = h("input", {
    id: "secret-origin",
    name: "origin",
    type: "url",
    autocomplete: "off",
    placeholder: "https://api.moonshot.cn (keys and bot tokens; optional)",
  });
  const submit = h("button", { type: "submit" }, "Store");
  const form = h(
    "form",
    { id: "secret-form", class: "inline", autocomplete: "off" },
    h("label", { for: "secret-name" }, "name"),
    name,
    h("label", { for: "secret-value" }, "value"),
    value,
    h("label", { for: "secret-origin" }, "origin"),
    origin,
    submit,
  );
  const { table: secretsTable, body } = table("secrets-table", ["name", "origin / rotation", "created", "updated", ""]);
  const rows = new Map<string, HTMLTableRowElement>();

  function upsert(s: Secret): void {
    const del = h("button", { type: "button", "data-action": "delete", class: "danger" }, "Delete");
    del.addEventListener("click", () => void remove(s.name, del));
    const tr = h(
      "tr",
      { "data-secret-name": s.name },
      h("td", {}, h("code", {}, s.name)),
      h("td", { class: "origin" }, s.origin ?? (s.rotated_at ? `previous value kept from ${s.rotated_at}` : "—")),
      h("td", {}, time(s.created_at)),
      h("td", {}, time(s.updated_at)),
      h("td", {}, del),
    );
    const existing = rows.get(s.name);
    rows.set(s.name, tr);
    if (existing) existing.replaceWith(tr);
    else body.append(tr);
  }

  async function remove(secretName: string, button: HTMLButtonElement): Promise<void> {
    ctx.clearError();
    button.disabled = true;
    try {
      await ctx.call(ADMIN_API.deleteSecret, { params: { name: secretName } });
      if (!ctx.alive()) return;
      rows.get(secretName)?.remove();
      rows.delete(secretName);
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
      button.disabled = false;
    }
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    ctx.clearError();
    const bound = origin.value.trim();
    const secret = { name: name.value.trim(), value: value.value, ...(bound ? { origin: bound } : {}) };
    value.value = ""; // cleared before the request: the value is never kept or shown, whatever the answer
    submit.disabled = true;
    try {
      const res = await ctx.call<Secret>(ADMIN_API.putSecret, { body: secret });
      if (!ctx.alive()) return;
      upsert(res.body);
      name.value = "";
      origin.value = "";
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    } finally {
      submit.disabled = false;
    }
  });

  async function load(): Promise<void> {
    ctx.clearError();
    try {
      const res = await ctx.call<{ secrets: Secret[] }>(ADMIN_API.secrets);
      if (!ctx.alive()) return;
      body.replaceChildren();
      rows.clear();
      for (const s of res.body.secrets) upsert(s);
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    }
  }

  ctx.root.append(
    heading("Secrets", () => void load()),
    h("p", { class: "muted" }, "Values are write-only: stored encrypted, never shown again. Storing an existing name replaces its value."),
    form,
    secretsTable,
  );
  void load();
  return undefined;
};
