/** Sessions: the chat session index, and one session's transcript with its tool metadata and its key's generations. */
import { ADMIN_API } from "../api-routes.ts";
import { nextCursor } from "./api.mts";
import { fill, h, time } from "./dom.mts";
import { heading, Pager, table, type ViewFactory } from "./view.mts";

interface SessionRow {
  session_key: string;
  agent_id: string;
  channel: string;
  room_id: string;
  user_id: string;
  scope: string;
  session_id: string;
  updated_at: string;
}

interface Message {
  seq: number;
  role: string;
  content: string;
  ts: string;
  run_id: string | null;
  tool_name: string | null;
  tool_call_id: string | null;
}

interface Generation {
  session_id: string;
  status: "current" | "archived";
  started_at: string;
}

export const sessionsView: ViewFactory = (ctx, arg) => {
  const { table: sessionsTable, body } = table("sessions-table", ["session", "agent", "channel", "room", "user", "scope", "active"]);
  const detail = h("section", { id: "session-detail", hidden: true });
  let shown: string | undefined;

  const pager = new Pager<SessionRow>(
    ctx,
    ADMIN_API.sessions,
    "sessions",
    () => ({ limit: 50 }),
    (sessions, first) => {
      if (first) body.replaceChildren();
      for (const s of sessions) {
        const href = `#/sessions/${encodeURIComponent(s.session_id)}`;
        const tr = h(
          "tr",
          { "data-session-id": s.session_id, title: s.session_key, class: s.session_id === shown ? "clickable selected" : "clickable" },
          h("td", {}, h("a", { class: "id", title: s.session_id, href }, s.session_id)),
          h("td", {}, s.agent_id),
          h("td", {}, s.channel),
          h("td", {}, s.room_id),
          h("td", {}, s.user_id),
          h("td", {}, s.scope),
          h("td", {}, time(s.updated_at)),
        );
        tr.addEventListener("click", (e) => {
          if (!(e.target instanceof HTMLAnchorElement)) ctx.navigate(href);
        });
        body.append(tr);
      }
    },
  );

  function messageItem(m: Message): HTMLLIElement {
    const meta = [m.tool_name && `tool ${m.tool_name}`, m.tool_call_id && `call ${m.tool_call_id}`].filter(Boolean).join(" · ");
    return h(
      "li",
      { "data-role": m.role },
      h("span", { class: "role" }, m.role),
      " ",
      time(m.ts),
      meta ? h("span", { class: "muted" }, ` ${meta}`) : null,
      m.run_id ? h("a", { class: "run-link", href: `#/runs/${encodeURIComponent(m.run_id)}` }, m.run_id) : null,
      h("pre", { class: "content" }, m.content),
    );
  }

  /** One page of the transcript appended to `list`; the "more" button follows `next_cursor`. */
  async function loadMessages(sessionId: string, cursor: string | undefined, list: HTMLOListElement, more: HTMLButtonElement) {
    more.disabled = true;
    try {
      const res = await ctx.call<{ session_key: string; messages: Message[] }>(ADMIN_API.messages, {
        params: { session_id: sessionId },
        query: { limit: 100, cursor },
      });
      if (!ctx.alive() || shown !== sessionId) return null;
      for (const m of res.body.messages) list.append(messageItem(m));
      const next = nextCursor(res.body);
      more.hidden = next === null;
      more.onclick = next === null ? null : () => void loadMessages(sessionId, next, list, more);
      return res.body;
    } catch (err) {
      if (ctx.alive() && shown === sessionId) ctx.fail(err);
      return null;
    } finally {
      more.disabled = false;
    }
  }

  /** Every generation of the session's key (current and archived, newest first), each linking to its transcript. */
  async function generationList(sessionKey: string, sessionId: string): Promise<HTMLElement | null> {
    try {
      const res = await ctx.call<{ generations: Generation[] }>(ADMIN_API.generations, { query: { session_key: sessionKey, limit: 50 } });
      const items = res.body.generations.map((g) =>
        h(
          "li",
          { "data-session-id": g.session_id, "data-status": g.status },
          g.session_id === sessionId
            ? h("span", { class: "id" }, g.session_id)
            : h("a", { class: "id", href: `#/sessions/${encodeURIComponent(g.session_id)}` }, g.session_id),
          ` ${g.status} · started `,
          time(g.started_at),
        ),
      );
      return h("details", { id: "generations" }, h("summary", {}, `Generations (${items.length})`), h("ul", {}, ...items));
    } catch {
      return null; // the transcript is still worth showing without them
    }
  }

  async function showTranscript(sessionId: string | undefined): Promise<void> {
    shown = sessionId;
    for (const tr of body.querySelectorAll("tr")) tr.classList.toggle("selected", tr.getAttribute("data-session-id") === sessionId);
    if (!sessionId) {
      detail.hidden = true;
      detail.replaceChildren();
      return;
    }
    ctx.clearError();
    const list = h("ol", { id: "transcript" });
    const more = h(
      "button",
      { type: "button", id: "transcript-more", class: "more", "data-action": "more", hidden: true },
      "More messages",
    );
    const first = await loadMessages(sessionId, undefined, list, more);
    if (!first) return;
    const generations = await generationList(first.session_key, sessionId);
    if (!ctx.alive() || shown !== sessionId) return;
    const close = h("button", { type: "button", "data-action": "close" }, "Close");
    close.addEventListener("click", () => ctx.navigate("#/sessions"));
    fill(
      detail,
      h("div", { class: "bar" }, h("h3", {}, `Session ${sessionId}`), close),
      h("p", { class: "muted" }, first.session_key),
      generations,
      first.messages.length === 0 ? h("p", { class: "muted" }, "No messages.") : null,
      list,
      more,
    );
    detail.hidden = false;
  }

  ctx.root.append(
    heading("Sessions", () => void pager.first()),
    sessionsTable,
    pager.button,
    detail,
  );
  void pager.first();
  void showTranscript(arg);
  return { show: (next) => void showTranscript(next) };
};
