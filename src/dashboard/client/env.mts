/**
 * Env requests (issue 21 §2): the `request_env_variables` requests models made, newest first — key names only.
 * An open request gets a small form, one password field per requested key: the values are cleared from the fields
 * as soon as they are read and sent once; the gateway stores them encrypted and never returns them, so this page
 * never has them again. After a submit the row shows the request as the gateway answers it: fulfilled.
 */
import { ADMIN_API } from "../api-routes.ts";
import { h, time } from "./dom.mts";
import { heading, Pager, table, type ViewFactory } from "./view.mts";

interface EnvKey {
  key: string;
  type?: "env" | "secret";
  required?: boolean;
  description?: string;
  suggestions?: string[];
}

interface EnvRequest {
  request_id: string;
  agent_id: string;
  session_id: string;
  run_id: string | null;
  keys: EnvKey[];
  status: "open" | "fulfilled";
  created_at: string;
  fulfilled_at: string | null;
}

export const envView: ViewFactory = (ctx) => {
  const { table: requestsTable, body } = table("env-requests-table", ["request", "agent / session", "keys", "status", "created", ""]);
  const empty = h("p", { id: "env-requests-empty", class: "muted", hidden: true }, "No environment requests.");
  const rows = new Map<string, HTMLTableRowElement>();

  function keyLine(k: EnvKey): HTMLElement {
    const notes = [k.type, k.required === false ? "optional" : "required", k.description].filter(Boolean).join(" · ");
    return h("li", { "data-key": k.key }, h("code", {}, k.key), notes ? h("span", { class: "muted" }, ` ${notes}`) : null);
  }

  /** The values form of an open request: one password field (and a "persist" box) per requested key. */
  function valuesForm(r: EnvRequest): HTMLFormElement {
    const fields = r.keys.map((k, i) => {
      const id = `env-value-${r.request_id}-${i}`;
      const input = h("input", {
        id,
        name: k.key,
        type: "password",
        required: k.required !== false,
        autocomplete: "new-password",
        spellcheck: false,
        "data-key": k.key,
      });
      const persist = h("input", { type: "checkbox", id: `${id}-persist`, "data-persist": k.key });
      return { key: k.key, input, persist, id };
    });
    const submit = h("button", { type: "submit", "data-action": "submit" }, "Submit values");
    const form = h(
      "form",
      { class: "inline env-values", autocomplete: "off", "data-request-id": r.request_id },
      ...fields.flatMap((f) => [
        h("label", { for: f.id }, f.key),
        f.input,
        h("label", { for: `${f.id}-persist`, title: "keep for every session of the agent" }, f.persist, " persist"),
      ]),
      submit,
    );
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      ctx.clearError();
      const values = fields
        .filter((f) => f.input.value !== "")
        .map((f) => ({ key: f.key, value: f.input.value, ...(f.persist.checked ? { persist: true } : {}) }));
      for (const f of fields) f.input.value = ""; // cleared before the request: never kept or shown, whatever the answer
      submit.disabled = true;
      try {
        const res = await ctx.call<EnvRequest>(ADMIN_API.submitEnvValues, {
          params: { request_id: r.request_id },
          body: { values },
        });
        if (!ctx.alive()) return;
        upsert(res.body);
      } catch (err) {
        if (ctx.alive()) ctx.fail(err);
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  function upsert(r: EnvRequest): void {
    const tr = h(
      "tr",
      { "data-request-id": r.request_id, "data-status": r.status },
      h("td", {}, h("span", { class: "id", title: r.request_id }, r.request_id)),
      h(
        "td",
        {},
        r.agent_id,
        " · ",
        h("a", { class: "id", title: r.session_id, href: `#/sessions/${encodeURIComponent(r.session_id)}` }, r.session_id),
        r.run_id ? h("a", { class: "id run-link", title: r.run_id, href: `#/runs/${encodeURIComponent(r.run_id)}` }, r.run_id) : null,
      ),
      h("td", {}, h("ul", { class: "keys" }, ...r.keys.map(keyLine))),
      h("td", { class: "status" }, r.status),
      h("td", {}, time(r.created_at)),
      h("td", {}, r.status === "open" ? valuesForm(r) : time(r.fulfilled_at)),
    );
    const existing = rows.get(r.request_id);
    rows.set(r.request_id, tr);
    if (existing) existing.replaceWith(tr);
    else body.append(tr);
    empty.hidden = rows.size > 0;
  }

  const pager = new Pager<EnvRequest>(
    ctx,
    ADMIN_API.envRequests,
    "env_requests",
    () => ({ limit: 50 }),
    (requests, first) => {
      if (first) {
        body.replaceChildren();
        rows.clear();
      }
      for (const r of requests) upsert(r);
      empty.hidden = rows.size > 0;
    },
  );

  ctx.root.append(
    heading("Env requests", () => void pager.first()),
    h(
      "p",
      { class: "muted" },
      "Values a model asked for (request_env_variables). Values are write-only: stored encrypted, never shown again; they reach the session's sandbox, the model gets the key names.",
    ),
    requestsTable,
    empty,
    pager.button,
  );
  void pager.first();
  return undefined;
};
