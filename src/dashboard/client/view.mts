/** What every dashboard view gets: its container, the API caller, its liveness, an error slot and a pager. */
import type { ApiRoute } from "../api-routes.ts";
import { type Caller, messageOf, nextCursor } from "./api.mts";
import { h } from "./dom.mts";

export interface ViewContext {
  /** The view's container, empty when the view starts. */
  root: HTMLElement;
  call: Caller;
  /** False once the operator went to another view or signed out: pollers stop, late answers are dropped. */
  alive(): boolean;
  /** Shows a failure (the server's `error.message`) in the view's one `.error` element. */
  fail(err: unknown): void;
  clearError(): void;
  navigate(hash: string): void;
}

/** A running view; `show(arg)` handles `#/view/<arg>` without rebuilding it (a run's detail, a transcript). */
export interface View {
  show?(arg: string | undefined): void;
}

export type ViewFactory = (ctx: ViewContext, arg: string | undefined) => View | undefined;

/** Dispatched on `window` just before the view showing is replaced (another view, the same one afresh, sign-out). */
export const VIEW_LEAVE_EVENT = "sophie:view-leave";

/** The view's error slot: holds at most one `p.error` (with `id`, if given) at a time. */
export function errorSlot(id?: string): { el: HTMLElement; fail(err: unknown): void; clear(): void } {
  const el = h("div", { class: "error-slot" });
  return {
    el,
    fail: (err) => el.replaceChildren(h("p", { class: "error", role: "alert", id }, messageOf(err))),
    clear: () => el.replaceChildren(),
  };
}

/** `<h2>` with a Refresh button beside it. */
export function heading(title: string, refresh?: () => void): HTMLElement {
  const bar = h("div", { class: "bar" }, h("h2", {}, title));
  if (refresh) {
    const b = h("button", { type: "button", "data-action": "refresh" }, "Refresh");
    b.addEventListener("click", refresh);
    bar.append(b);
  }
  return bar;
}

/** A table with a header row and an empty body. */
export function table(id: string, columns: string[]): { table: HTMLTableElement; body: HTMLTableSectionElement } {
  const body = h("tbody");
  const t = h("table", { id }, h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { scope: "col" }, c)))), body);
  return { table: t, body };
}

/**
 * First page of a list route, then a "more" button while the answer names a `next_cursor` (`?limit=&cursor=`
 * → `{<items>, next_cursor}`). Routes that do not page yet simply never show the button.
 */
export class Pager<T> {
  readonly button: HTMLButtonElement;
  readonly ctx: ViewContext;
  readonly route: ApiRoute;
  readonly key: string;
  readonly query: () => Record<string, string | number | undefined>;
  readonly onPage: (items: T[], first: boolean) => void;
  readonly params: () => Record<string, string>;
  #cursor: string | null = null;

  /** `key` names the items in the answer (`runs`, `jobs` …); `onPage` gets each page, `first` when it starts over. */
  constructor(
    ctx: ViewContext,
    route: ApiRoute,
    key: string,
    query: () => Record<string, string | number | undefined>,
    onPage: (items: T[], first: boolean) => void,
    params: () => Record<string, string> = () => ({}),
  ) {
    this.ctx = ctx;
    this.route = route;
    this.key = key;
    this.query = query;
    this.onPage = onPage;
    this.params = params;
    this.button = h("button", { type: "button", class: "more", "data-action": "more", hidden: true }, "More");
    this.button.addEventListener("click", () => void this.more());
  }

  /** Loads the first page (again); false when it failed (already shown). */
  async first(): Promise<boolean> {
    this.#cursor = null;
    this.button.hidden = true;
    return this.#load(undefined, true);
  }

  async more(): Promise<boolean> {
    return this.#cursor ? this.#load(this.#cursor, false) : false;
  }

  /** The first page's items, without touching the pager (pollers). */
  async peek(): Promise<T[] | null> {
    try {
      const res = await this.ctx.call<Record<string, unknown>>(this.route, { params: this.params(), query: this.query() });
      return this.ctx.alive() ? ((res.body[this.key] as T[] | undefined) ?? []) : null;
    } catch (err) {
      if (this.ctx.alive()) this.ctx.fail(err);
      return null;
    }
  }

  async #load(cursor: string | undefined, first: boolean): Promise<boolean> {
    this.button.disabled = true;
    try {
      const res = await this.ctx.call<Record<string, unknown>>(this.route, { params: this.params(), query: { ...this.query(), cursor } });
      if (!this.ctx.alive()) return false;
      this.onPage((res.body[this.key] as T[] | undefined) ?? [], first);
      this.#cursor = nextCursor(res.body);
      this.button.hidden = this.#cursor === null;
      return true;
    } catch (err) {
      if (this.ctx.alive()) this.ctx.fail(err);
      return false;
    } finally {
      this.button.disabled = false;
    }
  }
}

/**
 * Runs `fn` after a delay while the view is alive; `fn` answers the next delay, or null to stop. One timer at a
 * time: `kick(ms)` starts it, or brings a later pending run forward.
 */
export function poll(ctx: ViewContext, fn: () => Promise<number | null>): { kick(ms: number): void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let dueAt = Number.POSITIVE_INFINITY;
  let running = false;
  const schedule = (ms: number) => {
    if (!ctx.alive() || running || Date.now() + ms >= dueAt) return;
    clearTimeout(timer);
    dueAt = Date.now() + ms;
    timer = setTimeout(tick, ms);
  };
  const tick = async () => {
    timer = undefined;
    dueAt = Number.POSITIVE_INFINITY;
    if (!ctx.alive()) return;
    running = true;
    let next: number | null = null;
    try {
      next = await fn();
    } finally {
      running = false;
    }
    if (next !== null) schedule(next);
  };
  return { kick: schedule };
}
