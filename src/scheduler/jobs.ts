/**
 * Scheduler job records (S3 §4) and their D1 storage (migrations/0008_scheduler.sql).
 *
 * One Zod schema validates every write (POST and PUT of /api/admin/jobs): the
 * S3 fields exactly, the schedule parsed (`@every <Go duration>` ≥ 1m or an
 * RFC3339 one-shot; cron rejected), the time zone an IANA name, the notify
 * target checked. `created_at`, `updated_at`, `next_run_at` and `last_fired_at`
 * are the gateway's: accepted in a body (so a GET can be edited and PUT back)
 * and ignored.
 */
import { z } from "zod";
import type { RunCompletion } from "../runs/completion";
import { AGENT_ID } from "../sessions/keys";
import { checkUrl } from "../tools/net-policy";
import { CHAT_NOTIFY, isChatNotifyChannel } from "./chat-notify";
import { parseSchedule, type Schedule, validateTimeZone } from "./schedule";
import { type SlotState, slotAfter } from "./slots";

export const JOB_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/** Where a job's output goes when its run ends: nowhere, a signed webhook, or a chat (chat-notify.ts; issue 24 §1). */
export const NOTIFY_CHANNELS = ["none", "webhook", ...(Object.keys(CHAT_NOTIFY) as (keyof typeof CHAT_NOTIFY)[])] as const;
export type NotifyChannel = (typeof NOTIFY_CHANNELS)[number];

const Notify = z.strictObject({
  channel: z.string().refine((c) => (NOTIFY_CHANNELS as readonly string[]).includes(c), {
    message: `must be one of: ${NOTIFY_CHANNELS.join(", ")}`,
  }),
  target: z.string().max(2048).default(""),
});

/** A job as written by an admin (POST creates, PUT replaces). */
export const JobWrite = z
  .strictObject({
    job_id: z.string().regex(JOB_ID, "letters, digits, _ . and - (at most 64), starting with a letter or digit"),
    agent_id: z.string().regex(AGENT_ID, "lower-case letters, digits, _ and - (at most 64)"),
    schedule: z.string().min(1).max(256),
    message: z.string().min(1).max(100_000),
    mode: z.enum(["isolated", "main_like"]),
    notify: Notify.default({ channel: "none", target: "" }),
    enabled: z.boolean(),
    timezone: z.string().default("UTC"),
    // The gateway's own fields: accepted so that a GET body can be sent back, and ignored.
    created_at: z.string().optional(),
    updated_at: z.string().optional(),
    next_run_at: z.string().nullable().optional(),
    last_fired_at: z.string().nullable().optional(),
  })
  .superRefine((job, ctx) => {
    const schedule = parseSchedule(job.schedule);
    if (!schedule.ok) ctx.addIssue({ code: "custom", path: ["schedule"], message: schedule.error });
    const tz = validateTimeZone(job.timezone);
    if (!tz.ok) ctx.addIssue({ code: "custom", path: ["timezone"], message: tz.error });
    if (job.notify.channel === "none" && job.notify.target !== "") {
      ctx.addIssue({ code: "custom", path: ["notify", "target"], message: "must be empty when notify.channel is none" });
    }
    if (job.notify.channel === "webhook") {
      const url = checkUrl(job.notify.target);
      if (!url.ok) ctx.addIssue({ code: "custom", path: ["notify", "target"], message: `not an allowed webhook URL (${url.reason})` });
      else if (url.url.protocol !== "https:") ctx.addIssue({ code: "custom", path: ["notify", "target"], message: "must be an https URL" });
    }
    const chat = job.notify.channel;
    if (isChatNotifyChannel(chat) && !CHAT_NOTIFY[chat].target.test(job.notify.target)) {
      ctx.addIssue({ code: "custom", path: ["notify", "target"], message: `must be ${CHAT_NOTIFY[chat].rule}` });
    }
  });
export type JobWrite = z.infer<typeof JobWrite>;

/** A job as the API returns it: S3 §4's fields, then two the scheduler keeps. */
export interface JobRecord {
  job_id: string;
  agent_id: string;
  schedule: string;
  message: string;
  mode: "isolated" | "main_like";
  notify: { channel: NotifyChannel; target: string };
  enabled: boolean;
  timezone: string;
  created_at: string;
  updated_at: string;
  /** When the next firing is due (null: it will not fire again, or the job is disabled). */
  next_run_at: string | null;
  /** The slot of the latest firing. */
  last_fired_at: string | null;
}

interface JobRow {
  job_id: string;
  agent_id: string;
  schedule: string;
  message: string;
  mode: "isolated" | "main_like";
  notify_channel: NotifyChannel;
  notify_target: string;
  enabled: 0 | 1;
  timezone: string;
  created_at: string;
  updated_at: string;
  kind: "every" | "once";
  interval_ms: number | null;
  anchor_ms: number;
  next_run_ms: number | null;
  last_fired_at: string | null;
}

const COLUMNS =
  "job_id, agent_id, schedule, message, mode, notify_channel, notify_target, enabled, timezone, created_at, updated_at, kind, interval_ms, anchor_ms, next_run_ms, last_fired_at";

function toRecord(row: JobRow): JobRecord {
  return {
    job_id: row.job_id,
    agent_id: row.agent_id,
    schedule: row.schedule,
    message: row.message,
    mode: row.mode,
    notify: { channel: row.notify_channel, target: row.notify_target },
    enabled: row.enabled === 1,
    timezone: row.timezone,
    created_at: row.created_at,
    updated_at: row.updated_at,
    next_run_at: row.enabled === 1 && row.next_run_ms !== null ? new Date(row.next_run_ms).toISOString() : null,
    last_fired_at: row.last_fired_at,
  };
}

/** Why a write was refused (the route turns each into an S3 error). */
export type JobWriteRefusal = { reason: "exists" | "not_found" | "changed" | "notify_changed" } | { reason: "past"; message: string };

function parsed(job: JobWrite): Schedule {
  const s = parseSchedule(job.schedule);
  if (!s.ok) throw new Error(s.error); // JobWrite has validated it
  return s.value;
}

/** Slot state for a schedule set at `nowMs`. */
function slotsFor(schedule: Schedule, nowMs: number): Pick<SlotState, "kind" | "intervalMs" | "anchorMs"> {
  return schedule.kind === "every"
    ? { kind: "every", intervalMs: schedule.intervalMs, anchorMs: nowMs }
    : { kind: "once", intervalMs: null, anchorMs: schedule.atMs };
}

function pastOneShot(job: JobWrite, atMs: number): JobWriteRefusal {
  return {
    reason: "past",
    message: `schedule ${job.schedule} is in the past (${new Date(atMs).toISOString()}); an enabled one-shot needs a future time`,
  };
}

/** Creates a job. Refused when the id exists, or when an enabled one-shot's time has passed. */
export async function createJob(
  db: D1Database,
  job: JobWrite,
  now: Date,
): Promise<{ ok: true; job: JobRecord } | ({ ok: false } & JobWriteRefusal)> {
  const slots = slotsFor(parsed(job), now.getTime());
  const next = slotAfter(slots, now.getTime());
  if (job.enabled && next === null) return { ok: false, ...pastOneShot(job, slots.anchorMs) };
  const result = await db
    .prepare(
      `INSERT INTO jobs (${COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13, ?14, NULL)
       ON CONFLICT (job_id) DO NOTHING`,
    )
    .bind(...rowValues(job.job_id, job, now, slots, next))
    .run();
  if (result.meta.changes !== 1) return { ok: false, reason: "exists" };
  return { ok: true, job: (await getJob(db, job.job_id)) as JobRecord };
}

/**
 * Replaces a job (PUT). The next run is kept when neither the schedule nor `enabled` changed; a new
 * schedule is anchored now; re-enabling starts at the next slot after now (missed windows are not replayed).
 * The write is conditional on the row not having changed since it was read. `keepNotify`: refused ("notify_changed")
 * unless the write keeps the stored notify exactly — how a job whose report channel is off can still be fixed (D-084).
 */
export async function replaceJob(
  db: D1Database,
  jobId: string,
  job: JobWrite,
  now: Date,
  o: { keepNotify?: boolean } = {},
): Promise<{ ok: true; job: JobRecord } | ({ ok: false } & JobWriteRefusal)> {
  const current = await db.prepare(`SELECT ${COLUMNS} FROM jobs WHERE job_id = ?1`).bind(jobId).first<JobRow>();
  if (!current) return { ok: false, reason: "not_found" };
  const notifyKept = current.notify_channel === job.notify.channel && current.notify_target === job.notify.target;
  if (o.keepNotify && !notifyKept) return { ok: false, reason: "notify_changed" };
  const nowMs = now.getTime();
  const scheduleChanged = current.schedule !== job.schedule;
  const slots = scheduleChanged
    ? slotsFor(parsed(job), nowMs)
    : { kind: current.kind, intervalMs: current.interval_ms, anchorMs: current.anchor_ms };
  let next: number | null;
  if (!scheduleChanged && job.enabled && current.enabled === 1) next = current.next_run_ms;
  else next = slotAfter(slots, nowMs);
  if (job.enabled && next === null) {
    return current.kind === "once" && !scheduleChanged && current.enabled === 0 && current.last_fired_at !== null
      ? { ok: false, reason: "past", message: `one-shot job ${jobId} has already fired; give it a new schedule to run it again` }
      : { ok: false, ...pastOneShot(job, slots.anchorMs) };
  }
  const result = await db
    .prepare(
      `UPDATE jobs SET agent_id = ?2, schedule = ?3, message = ?4, mode = ?5, notify_channel = ?6, notify_target = ?7, enabled = ?8,
              timezone = ?9, updated_at = ?10, kind = ?11, interval_ms = ?12, anchor_ms = ?13, next_run_ms = ?14
       WHERE job_id = ?1 AND updated_at = ?15 AND next_run_ms IS ?16 AND enabled = ?17 AND notify_channel = ?18 AND notify_target = ?19`,
    )
    .bind(
      ...rowValues(jobId, job, now, slots, next),
      current.updated_at,
      current.next_run_ms,
      current.enabled,
      // The notify as read: a `keepNotify` write never lands on a notify someone else changed meanwhile.
      current.notify_channel,
      current.notify_target,
    )
    .run();
  if (result.meta.changes !== 1) return { ok: false, reason: "changed" };
  return { ok: true, job: (await getJob(db, jobId)) as JobRecord };
}

/** Deletes a job and its firing records (its runs, and the audit log, keep the history). */
export async function deleteJob(db: D1Database, jobId: string): Promise<JobRecord | null> {
  const job = await getJob(db, jobId);
  if (!job) return null;
  await db.batch([
    db.prepare("DELETE FROM jobs WHERE job_id = ?1").bind(jobId),
    db.prepare("DELETE FROM job_firings WHERE job_id = ?1").bind(jobId),
  ]);
  return job;
}

export async function getJob(db: D1Database, jobId: string): Promise<JobRecord | null> {
  const row = await db.prepare(`SELECT ${COLUMNS} FROM jobs WHERE job_id = ?1`).bind(jobId).first<JobRow>();
  return row ? toRecord(row) : null;
}

/** Jobs in job_id order (unique), after `after` (a page cursor), optionally one agent's. */
export async function listJobs(
  db: D1Database,
  f: { agentId?: string | undefined; after?: string | undefined; limit: number },
): Promise<JobRecord[]> {
  const rows = await db
    .prepare(`SELECT ${COLUMNS} FROM jobs WHERE (?1 IS NULL OR agent_id = ?1) AND job_id > ?2 ORDER BY job_id LIMIT ?3`)
    .bind(f.agentId ?? null, f.after ?? "", f.limit)
    .all<JobRow>();
  return rows.results.map(toRecord);
}

/** A firing as the admin API lists it. */
export interface FiringRecord {
  job_id: string;
  scheduled_for: string;
  agent_id: string;
  status: "claimed" | "dispatched" | "skipped" | "failed";
  missed: number;
  claimed_at: string;
  attempts: number;
  run_id: string | null;
  session_key: string | null;
  dispatched_at: string | null;
  error: string | null;
  /** Issue 21 §1: the run's final status and automation completion, present once the run has ended. */
  run_status?: string;
  completion?: RunCompletion;
  notify: {
    channel: string;
    status: "none" | "pending" | "delivered" | "failed";
    attempts: number;
    error: string | null;
    notified_at: string | null;
  };
}

/** A job's firings, newest first (scheduled_for descending, unique per job), after `before` (a page cursor). */
export async function listFirings(
  db: D1Database,
  jobId: string,
  f: { before?: string | undefined; limit: number },
): Promise<FiringRecord[]> {
  const rows = await db
    .prepare(
      `SELECT job_id, scheduled_for, agent_id, status, missed, claimed_at, attempts, run_id, session_key, dispatched_at, error,
              run_status, completion, notify_channel, notify_status, notify_attempts, notify_error, notified_at
       FROM job_firings WHERE job_id = ?1 AND (?2 IS NULL OR scheduled_for < ?2) ORDER BY scheduled_for DESC LIMIT ?3`,
    )
    .bind(jobId, f.before ?? null, f.limit)
    .all<
      Omit<FiringRecord, "notify" | "run_status" | "completion"> & {
        run_status: string | null;
        completion: string | null;
        notify_channel: string;
        notify_status: FiringRecord["notify"]["status"];
        notify_attempts: number;
        notify_error: string | null;
        notified_at: string | null;
      }
    >();
  return rows.results.map(
    ({ notify_channel, notify_status, notify_attempts, notify_error, notified_at, run_status, completion, ...f }) => ({
      ...f,
      ...(run_status === null ? {} : { run_status }),
      ...(completion === null ? {} : { completion: JSON.parse(completion) as RunCompletion }),
      notify: { channel: notify_channel, status: notify_status, attempts: notify_attempts, error: notify_error, notified_at },
    }),
  );
}

/** Parameters ?1 … ?14 of a job write: id, the S3 fields, the time of the write, and the slot state. */
function rowValues(
  jobId: string,
  job: JobWrite,
  now: Date,
  slots: Pick<SlotState, "kind" | "intervalMs" | "anchorMs">,
  next: number | null,
): (string | number | null)[] {
  return [
    jobId,
    job.agent_id,
    job.schedule,
    job.message,
    job.mode,
    job.notify.channel,
    job.notify.target,
    job.enabled ? 1 : 0,
    canonicalZone(job.timezone),
    now.toISOString(),
    slots.kind,
    slots.intervalMs,
    slots.anchorMs,
    next,
  ];
}

function canonicalZone(name: string): string {
  const tz = validateTimeZone(name);
  return tz.ok ? tz.value : name;
}
