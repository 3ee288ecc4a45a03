/**
 * A tiny element builder. Every value goes in as text (`textContent`) or as an attribute through the DOM API —
 * never through `innerHTML` — so nothing the gateway returns can become markup or script.
 */

type Attrs = Record<string, string | number | boolean | null | undefined>;
type Child = Node | string | number | null | undefined | false;

/** `h("td", {class: "status"}, run.status)`: an element with attributes (false/null/undefined omitted) and text or element children. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, ...children);
  return el;
}

/** Appends children, strings as text nodes. */
export function append(el: Element, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
}

/** Replaces an element's children (null, undefined and false skipped). */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, ...children);
}

/** The element with this id, or a clear error when the page shell lacks it. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} is missing from the page`);
  return el as T;
}

/** A value as short readable text: strings as they are, anything else as compact JSON. */
export function show(value: unknown): string {
  if (value === null || value === undefined) return "—";
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** An ISO time as local `YYYY-MM-DD HH:MM:SS` (the ISO text itself in the title). */
export function time(iso: string | null | undefined): HTMLElement {
  if (!iso) return h("span", { class: "muted" }, "—");
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return h("span", {}, iso);
  const pad = (n: number) => String(n).padStart(2, "0");
  const text = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return h("time", { datetime: iso, title: iso }, text);
}

/** Today's date in UTC as YYYY-MM-DD (audit days are UTC). */
export function todayUtc(): string {
  return new Date().toISOString().slice(0, 10);
}
