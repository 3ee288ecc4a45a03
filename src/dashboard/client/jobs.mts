/** Jobs: scheduler jobs with their next firing; create one, enable or disable it (GET it, PUT it back flipped). */
import { ADMIN_API } from "../api-routes.ts";
import { h, time } from "./dom.mts";
import { heading, Pager, table, type ViewFactory } from "./view.mts";

interface Job {
  job_id: string;
  agent_id: string;
  schedule: string;
  message: string;
  mode: string;
  enabled: boolean;
  timezone: string;
  next_run_at: string | null;
  last_fired_at: string | null;
}

/** A labelled form field. */
function field(label: string, control: HTMLElement): HTMLElement {
  return h("label", { class: "field" }, h("span", {}, label), control);
}

export const jobsView: ViewFactory = (ctx) => {
  const jobId = h("input", {
    id: "job-id",
    name: "job_id",
    required: true,
    pattern: "[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}",
    autocomplete: "off",
  });
  const agentId = h("input", { id: "job-agent", name: "agent_id", required: true, placeholder: "main", autocomplete: "off" });
  const schedule = h("input", { id: "job-schedule", name: "schedule", required: true, placeholder: "@every 1h  or  2030-01-01T09:00:00Z" });
  const message = h("textarea", { id: "job-message", name: "message", required: true, rows: 2 });
  const mode = h(
    "select",
    { id: "job-mode", name: "mode" },
    h("option", { value: "isolated" }, "isolated"),
    h("option", { value: "main_like" }, "main_like"),
  );
  const timezone = h("input", { id: "job-timezone", name: "timezone", value: "UTC", required: true });
  const notifyChannel = h(
    "select",
    { id: "job-notify-channel", name: "notify_channel" },
    h("option", { value: "none" }, "none"),
    h("option", { value: "webhook" }, "webhook"),
    h("option", { value: "telegram" }, "telegram"),
    h("option", { value: "slack" }, "slack"),
    h("option", { value: "discord" }, "discord"),
  );
  // A webhook URL, a Telegram chat id (or @channelusername), a Slack or a Discord channel id: the gateway checks which (docs/scheduler.md).
  const notifyTarget = h("input", {
    id: "job-notify-target",
    name: "notify_target",
    autocomplete: "off",
    placeholder: "https://… · Telegram chat id · Slack C… · Discord channel id",
  });
  const enabled = h("input", { id: "job-enabled", name: "enabled", type: "checkbox", checked: true });
  const submit = h("button", { id: "job-submit", type: "submit" }, "Create job");
  const form = h(
    "form",
    { id: "job-form", class: "grid" },
    field("job_id", jobId),
    field("agent_id", agentId),
    field("schedule", schedule),
    field("message", message),
    field("mode", mode),
    field("timezone", timezone),
    field("notify", notifyChannel),
    field("notify target", notifyTarget),
    h("label", { class: "check" }, enabled, " enabled"),
    h("div", {}, submit),
  );

  const { table: jobsTable, body } = table("jobs-table", ["job", "agent", "schedule", "mode", "enabled", "next run", "last fired", ""]);
  const rows = new Map<string, HTMLTableRowElement>();

  function row(job: Job): HTMLTableRowElement {
    const toggle = h("button", { type: "button", "data-action": "toggle" }, job.enabled ? "Disable" : "Enable");
    toggle.addEventListener("click", () => void flip(job.job_id, toggle));
    return h(
      "tr",
      { "data-job-id": job.job_id, "data-enabled": String(job.enabled), title: job.message },
      h("td", {}, job.job_id),
      h("td", {}, job.agent_id),
      h("td", {}, h("code", {}, job.schedule), job.timezone !== "UTC" ? ` (${job.timezone})` : ""),
      h("td", {}, job.mode),
      h("td", { class: "enabled" }, job.enabled ? "yes" : "no"),
      h("td", { class: "next-run" }, time(job.next_run_at)),
      h("td", {}, time(job.last_fired_at)),
      h("td", {}, toggle),
    );
  }

  function upsert(job: Job, where: "top" | "bottom"): void {
    const tr = row(job);
    const existing = rows.get(job.job_id);
    rows.set(job.job_id, tr);
    if (existing) existing.replaceWith(tr);
    else if (where === "top") body.prepend(tr);
    else body.append(tr);
  }

  async function flip(id: string, button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    ctx.clearError();
    try {
      const current = await ctx.call<Job>(ADMIN_API.job, { params: { job_id: id } });
      const res = await ctx.call<Job>(ADMIN_API.replaceJob, {
        params: { job_id: id },
        body: { ...current.body, enabled: !current.body.enabled },
      });
      if (ctx.alive()) upsert(res.body, "top");
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
      button.disabled = false;
    }
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    ctx.clearError();
    submit.disabled = true;
    const job = {
      job_id: jobId.value.trim(),
      agent_id: agentId.value.trim(),
      schedule: schedule.value.trim(),
      message: message.value,
      mode: mode.value,
      enabled: enabled.checked,
      timezone: timezone.value.trim() || "UTC",
      notify: { channel: notifyChannel.value, target: notifyChannel.value === "none" ? "" : notifyTarget.value.trim() },
    };
    try {
      const res = await ctx.call<Job>(ADMIN_API.createJob, { body: job });
      if (!ctx.alive()) return;
      upsert(res.body, "top");
      form.reset();
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    } finally {
      submit.disabled = false;
    }
  });

  const pager = new Pager<Job>(
    ctx,
    ADMIN_API.jobs,
    "jobs",
    () => ({ limit: 50 }),
    (jobs, first) => {
      if (first) {
        body.replaceChildren();
        rows.clear();
      }
      for (const job of jobs) upsert(job, "bottom");
    },
  );

  ctx.root.append(
    heading("Jobs", () => void pager.first()),
    jobsTable,
    pager.button,
    h("h3", {}, "New job"),
    form,
  );
  void pager.first();
  return undefined;
};
