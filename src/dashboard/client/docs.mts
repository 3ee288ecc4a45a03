/**
 * The API reference (/docs), built from /openapi.json: operations grouped by tag (or by path), each with its
 * method, credential (`x-auth`), parameters, request body and responses (schemas resolved into readable text),
 * and a "try it" form. A "try it" request goes to this origin only, with the token typed into the header field —
 * kept in sessionStorage for this tab, never shown again and sent only as `Authorization: Bearer`.
 */
import { DOCS_API, TOKEN_KEYS } from "../api-routes.ts";
import { fillPath, messageOf, queryString } from "./api.mts";
import { byId, fill, h } from "./dom.mts";
import { type Doc, type Schema, sample, schemaNote, schemaText } from "./schema.mts";

interface Parameter {
  name: string;
  in: "path" | "query" | "header" | "cookie";
  required?: boolean;
  description?: string;
  schema?: Schema;
}

interface Operation {
  summary?: string;
  description?: string;
  tags?: string[];
  parameters?: Parameter[];
  requestBody?: { required?: boolean; content?: Record<string, { schema?: Schema }> };
  responses?: Record<string, { description?: string; content?: Record<string, { schema?: Schema }> }>;
  "x-auth"?: string;
}

const METHODS = ["get", "post", "put", "patch", "delete"] as const;
/** Scopes whose operations take the bearer token. */
const BEARER_SCOPES = new Set(["admin", "api", "sandbox"]);
/** A response body is shown up to this many characters (event streams go on until they end or are stopped). */
const MAX_SHOWN = 200_000;

const tokenInput = byId<HTMLInputElement>("docs-token");
const storedToken = () => sessionStorage.getItem(TOKEN_KEYS.docs);

function showTokenState(): void {
  tokenInput.placeholder = storedToken() ? "a token is set for this tab" : "paste a token";
}

tokenInput.addEventListener("change", () => {
  const value = tokenInput.value.trim();
  tokenInput.value = "";
  if (value) sessionStorage.setItem(TOKEN_KEYS.docs, value);
  showTokenState();
});
byId("docs-token-clear").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEYS.docs);
  tokenInput.value = "";
  showTokenState();
});
showTokenState();

/** The group an operation is listed under: its first tag, else the path's leading words (`admin jobs`, `v1 runs`). */
function groupOf(path: string, op: Operation): string {
  if (op.tags?.[0]) return op.tags[0];
  const words = path.split("/").filter((w) => w && !w.startsWith("{"));
  if (words[0] === "api" && words[1] === "admin") return `admin ${words[2] === "chat" ? (words[3] ?? "chat") : (words[2] ?? "")}`.trim();
  if (words[0] === "v1") return `v1 ${words[1] ?? ""}`.trim();
  return words[0] ?? "/";
}

const anchor = (method: string, path: string) => `op-${method}-${path.replace(/[^A-Za-z0-9]+/g, "-").replace(/^-|-$/g, "")}`;

function schemaBlock(schema: Schema | undefined, doc: Doc): HTMLElement {
  const note = schemaNote(schema, doc);
  return h("div", {}, note ? h("p", { class: "muted" }, note) : null, h("pre", { class: "schema" }, schemaText(schema ?? {}, doc)));
}

function parametersTable(params: Parameter[], doc: Doc): HTMLElement {
  return h(
    "table",
    { class: "params" },
    h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "in"), h("th", {}, "type"), h("th", {}, "notes"))),
    h(
      "tbody",
      {},
      ...params.map((p) =>
        h(
          "tr",
          {},
          h("td", {}, h("code", {}, p.name), p.required ? h("span", { class: "required", title: "required" }, " *") : null),
          h("td", {}, p.in),
          h("td", {}, h("code", {}, schemaText(p.schema ?? {}, doc))),
          h("td", {}, [p.description, schemaNote(p.schema, doc)].filter(Boolean).join("; ")),
        ),
      ),
    ),
  );
}

/** The "try it" form of one operation. */
function tryIt(method: string, path: string, op: Operation, doc: Doc): HTMLElement {
  const params = (op.parameters ?? []).filter((p) => p.in !== "cookie");
  const inputs = params.map((p) => ({
    p,
    input: h("input", {
      name: p.name,
      required: p.in === "path" || p.required === true,
      placeholder: schemaText(p.schema ?? {}, doc).split("\n")[0],
      autocomplete: "off",
    }),
  }));
  const json = op.requestBody?.content?.["application/json"];
  const body = json
    ? h(
        "textarea",
        { class: "body", rows: 8, spellcheck: false, "aria-label": "request body" },
        `${JSON.stringify(sample(json.schema, doc), null, 2)}`,
      )
    : null;
  const send = h("button", { type: "submit" }, "Send");
  const stop = h("button", { type: "button", hidden: true }, "Stop");
  const status = h("p", { class: "response-status", hidden: true });
  const out = h("pre", { class: "response-body", hidden: true });
  const scope = op["x-auth"] ?? "none";
  let controller: AbortController | null = null;

  const form = h(
    "form",
    { class: "try" },
    h("h4", {}, "Try it"),
    BEARER_SCOPES.has(scope)
      ? h("p", { class: "muted" }, `Sends the token from the header field as Authorization: Bearer (needs the ${scope} scope).`)
      : null,
    ...inputs.map(({ p, input }) => h("label", { class: "field" }, h("span", {}, `${p.name} (${p.in})`), input)),
    body ? h("label", { class: "field" }, h("span", {}, "body (application/json)"), body) : null,
    h("div", { class: "bar" }, send, stop),
    status,
    out,
  );

  stop.addEventListener("click", () => controller?.abort());
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    controller?.abort();
    controller = new AbortController();
    const pathParams: Record<string, string> = {};
    const query: Record<string, string> = {};
    const headers: Record<string, string> = { Accept: "application/json, */*;q=0.5" };
    for (const { p, input } of inputs) {
      const v = input.value;
      if (p.in === "path") pathParams[p.name] = v;
      else if (p.in === "query") query[p.name] = v;
      else if (v !== "") headers[p.name] = v;
    }
    const token = storedToken();
    if (BEARER_SCOPES.has(scope) && token) headers.Authorization = `Bearer ${token}`;
    if (body) headers["Content-Type"] = "application/json";
    status.hidden = false;
    out.hidden = false;
    out.textContent = "";
    status.className = "response-status";
    let url: string;
    try {
      url = fillPath(path, pathParams) + queryString(query);
      if (!url.startsWith("/") || url.startsWith("//")) throw new Error("not a path on this gateway");
    } catch (err) {
      status.textContent = messageOf(err);
      status.classList.add("error");
      return;
    }
    status.textContent = `${method.toUpperCase()} ${url} …`;
    stop.hidden = false;
    const started = performance.now();
    try {
      const res = await fetch(url, {
        method: method.toUpperCase(),
        headers,
        ...(body ? { body: body.value } : {}),
        credentials: "omit",
        cache: "no-store",
        redirect: "manual",
        referrerPolicy: "no-referrer",
        signal: controller.signal,
      });
      const type = res.headers.get("Content-Type") ?? "";
      status.textContent = `HTTP ${res.status} ${res.statusText} · ${type || "no body"} · ${Math.round(performance.now() - started)} ms`;
      status.setAttribute("data-status", String(res.status));
      const reader = res.body?.getReader();
      const decoder = new TextDecoder();
      let text = "";
      while (reader) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
        out.textContent = text.slice(0, MAX_SHOWN);
      }
      text += decoder.decode();
      if (/json/i.test(type) && !/ndjson/i.test(type)) {
        try {
          text = JSON.stringify(JSON.parse(text), null, 2);
        } catch {
          /* shown as sent */
        }
      }
      out.textContent = text.slice(0, MAX_SHOWN) || "(empty body)";
    } catch (err) {
      status.textContent += ` — ${controller.signal.aborted ? "stopped" : messageOf(err)}`;
    } finally {
      stop.hidden = true;
    }
  });
  return form;
}

function operationBlock(method: string, path: string, op: Operation, doc: Doc): HTMLElement {
  const scope = op["x-auth"] ?? "none";
  const params = op.parameters ?? [];
  const requestContent = Object.entries(op.requestBody?.content ?? {});
  const responses = Object.entries(op.responses ?? {});
  return h(
    "details",
    { class: "operation", id: anchor(method, path), "data-method": method, "data-path": path },
    h(
      "summary",
      {},
      h("span", { class: `method ${method}` }, method.toUpperCase()),
      " ",
      h("code", { class: "path" }, path),
      " ",
      h("span", { class: "auth", "data-auth": scope, title: "the credential this operation needs (x-auth)" }, scope),
      op.summary ? h("span", { class: "summary" }, ` ${op.summary}`) : null,
    ),
    op.description ? h("p", {}, op.description) : null,
    h(
      "p",
      {},
      "Auth: ",
      h("code", {}, scope),
      BEARER_SCOPES.has(scope)
        ? ` — Authorization: Bearer <${scope} token>`
        : scope === "signature"
          ? " — the platform's request signature"
          : " — none",
    ),
    params.length > 0 ? h("h4", {}, "Parameters") : null,
    params.length > 0 ? parametersTable(params, doc) : null,
    requestContent.length > 0 ? h("h4", {}, `Request body${op.requestBody?.required ? "" : " (optional)"}`) : null,
    ...requestContent.map(([type, media]) => h("div", { class: "media" }, h("p", {}, h("code", {}, type)), schemaBlock(media.schema, doc))),
    h("h4", {}, "Responses"),
    h(
      "dl",
      { class: "responses" },
      ...responses.flatMap(([code, r]) => [
        h("dt", { "data-status": code }, code),
        h(
          "dd",
          {},
          r.description ?? "",
          ...Object.entries(r.content ?? {}).map(([type, media]) =>
            h("div", { class: "media" }, h("p", {}, h("code", {}, type)), schemaBlock(media.schema, doc)),
          ),
        ),
      ]),
    ),
    tryIt(method, path, op, doc),
  );
}

function render(doc: Doc): void {
  const groups = new Map<string, HTMLElement[]>();
  const paths = (doc.paths ?? {}) as Record<string, Record<string, Operation>>;
  for (const path of Object.keys(paths).sort()) {
    for (const method of METHODS) {
      const op = paths[path]?.[method];
      if (!op) continue;
      const group = groupOf(path, op);
      if (!groups.has(group)) groups.set(group, []);
      groups.get(group)?.push(operationBlock(method, path, op, doc));
    }
  }
  const info = (doc.info ?? {}) as { title?: string; version?: string; description?: string };
  const names = [...groups.keys()].sort();
  const filter = h("input", { id: "docs-filter", type: "search", placeholder: "filter operations", autocomplete: "off" });
  const sections = names.map((name) =>
    h("section", { class: "group", id: `group-${name.replace(/[^A-Za-z0-9]+/g, "-")}` }, h("h2", {}, name), ...(groups.get(name) ?? [])),
  );
  filter.addEventListener("input", () => {
    const q = filter.value.trim().toLowerCase();
    for (const section of sections) {
      let any = false;
      for (const op of section.querySelectorAll<HTMLElement>("details.operation")) {
        const match = !q || (op.textContent ?? "").toLowerCase().includes(q);
        op.hidden = !match;
        any ||= match;
      }
      section.hidden = !any;
    }
  });
  fill(
    byId("reference"),
    h("h1", {}, `${info.title ?? "API"} ${info.version ?? ""}`.trim()),
    info.description ? h("p", {}, info.description) : null,
    h("nav", { class: "toc" }, ...names.map((n) => h("a", { href: `#group-${n.replace(/[^A-Za-z0-9]+/g, "-")}` }, n))),
    filter,
    ...sections,
  );
  // A link to one operation opens it.
  let target: HTMLElement | null = null;
  try {
    target = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
  } catch {
    /* a malformed fragment opens nothing */
  }
  if (target instanceof HTMLDetailsElement) {
    target.open = true;
    target.scrollIntoView();
  }
}

async function main(): Promise<void> {
  try {
    const res = await fetch(DOCS_API.openapi.path, { credentials: "omit", cache: "no-store", headers: { Accept: "application/json" } });
    if (!res.ok) throw new Error(`GET ${DOCS_API.openapi.path} answered ${res.status}`);
    render((await res.json()) as Doc);
  } catch (err) {
    byId("reference").replaceChildren(h("p", { class: "error", role: "alert" }, messageOf(err)));
  }
}

void main();
