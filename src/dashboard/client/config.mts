/**
 * Config: the configuration in force as JSON (sensitive fields blanked by the gateway), edited in place and saved
 * as a new version. JSON syntax errors and the gateway's validation issues are listed beside the editor; the
 * save carries `If-Match` with the version it was loaded from, so a concurrent change is refused (409), not lost.
 */
import { ADMIN_API } from "../api-routes.ts";
import { ApiError, nextCursor } from "./api.mts";
import { h, time } from "./dom.mts";
import { heading, table, type ViewFactory } from "./view.mts";

interface Saved {
  version: number;
  sha256: string;
  created_at: string;
}

interface Versions {
  in_force?: { source: string; version: number; sha256: string; problem?: string };
  versions?: { version: number; sha256: string; created_at: string; actor: string }[];
}

/** The validation issues of a 400 answer (`error.issues[]`), each as `<path>: <message>` (a path array joined with dots). */
function issuesOf(err: ApiError): string[] {
  const issues = (err.body as { error?: { issues?: unknown } } | null)?.error?.issues;
  if (!Array.isArray(issues)) return [];
  return issues.map((i: { path?: unknown; message?: unknown }) => {
    const path = Array.isArray(i.path) ? i.path.join(".") : typeof i.path === "string" ? i.path : "";
    return `${path || "(root)"}: ${String(i.message ?? "")}`;
  });
}

export const configView: ViewFactory = (ctx) => {
  const editor = h("textarea", {
    id: "config-editor",
    spellcheck: false,
    rows: 28,
    "aria-label": "configuration (JSON)",
    autocomplete: "off",
  });
  const save = h("button", { id: "config-save", type: "button" }, "Save as new version");
  const reload = h("button", { type: "button", "data-action": "reload" }, "Discard changes");
  const errors = h("ul", { id: "config-errors" });
  const saved = h("p", { id: "config-saved", hidden: true });
  const inForce = h("p", { id: "config-in-force", class: "muted" });
  const { table: versionsTable, body: versionsBody } = table("config-versions", ["version", "saved", "by", "sha256"]);
  /** The ETag of what the editor was loaded from (`"<version>"`): sent back as If-Match. */
  let etag: string | null = null;

  async function load(): Promise<void> {
    ctx.clearError();
    errors.replaceChildren();
    try {
      const res = await ctx.call<Record<string, unknown>>(ADMIN_API.config);
      if (!ctx.alive()) return;
      editor.value = `${JSON.stringify(res.body, null, 2)}\n`;
      etag = res.headers.get("ETag");
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    }
    await loadVersions();
  }

  const moreVersions = h("button", { type: "button", class: "more", "data-action": "more", hidden: true }, "More versions");

  function versionRow(v: { version: number; sha256: string; created_at: string; actor: string }, current: boolean): HTMLTableRowElement {
    return h(
      "tr",
      { "data-version": v.version, class: current ? "selected" : undefined },
      h("td", {}, v.version),
      h("td", {}, time(v.created_at)),
      h("td", {}, v.actor),
      h("td", {}, h("code", {}, v.sha256.slice(0, 16))),
    );
  }

  /** The version in force and the posted versions, newest first; "More versions" follows `next_cursor`. */
  async function loadVersions(cursor?: string): Promise<void> {
    moreVersions.disabled = true;
    try {
      const res = await ctx.call<Versions>(ADMIN_API.configVersions, { query: { limit: 20, cursor } });
      if (!ctx.alive()) return;
      const f = res.body.in_force;
      if (cursor === undefined) {
        inForce.textContent = f
          ? `In force: ${f.source === "bundled" ? "the bundled file" : `version ${f.version}`} (sha256 ${f.sha256.slice(0, 16)}…)${f.problem ? ` — ${f.problem}` : ""}`
          : "";
        versionsBody.replaceChildren();
      }
      for (const v of res.body.versions ?? []) versionsBody.append(versionRow(v, f?.source === "admin" && f.version === v.version));
      const next = nextCursor(res.body);
      moreVersions.hidden = next === null;
      moreVersions.onclick = next === null ? null : () => void loadVersions(next);
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    } finally {
      moreVersions.disabled = false;
    }
  }

  save.addEventListener("click", async () => {
    ctx.clearError();
    errors.replaceChildren();
    saved.hidden = true;
    let config: unknown;
    try {
      config = JSON.parse(editor.value);
    } catch (err) {
      errors.append(h("li", {}, `JSON syntax error: ${(err as Error).message}`));
      return;
    }
    if (config === null || typeof config !== "object" || Array.isArray(config)) {
      errors.append(h("li", {}, "(config): the configuration must be a JSON object"));
      return;
    }
    save.disabled = true;
    try {
      const res = await ctx.call<Saved>(ADMIN_API.saveConfig, { body: config, headers: etag ? { "If-Match": etag } : {} });
      if (!ctx.alive()) return;
      etag = `"${res.body.version}"`;
      saved.textContent = `Saved as version ${res.body.version} (sha256 ${res.body.sha256.slice(0, 16)}…).`;
      saved.hidden = false;
      await loadVersions();
    } catch (err) {
      if (!ctx.alive()) return;
      ctx.fail(err);
      if (err instanceof ApiError && err.status === 400) {
        const issues = issuesOf(err);
        for (const text of issues.length > 0 ? issues : [err.message]) errors.append(h("li", {}, text));
      }
    } finally {
      save.disabled = false;
    }
  });
  reload.addEventListener("click", () => void load());

  ctx.root.append(
    heading("Configuration"),
    h(
      "p",
      { class: "muted" },
      "The configuration in force, as JSON. Saving validates it with the gateway's schema and stores a new version.",
    ),
    editor,
    h("div", { class: "bar" }, save, reload),
    errors,
    saved,
    h("h3", {}, "Versions"),
    inForce,
    versionsTable,
    moreVersions,
  );
  void load();
  return undefined;
};
