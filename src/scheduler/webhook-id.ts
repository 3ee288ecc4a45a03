/**
 * The `webhook-id` of a scheduled delivery: the same for every attempt at one job's slot, so a receiver drops
 * repeats. Apart from notify.ts so the alert notifications (alert-notify.ts), which notify.ts drives, can share it.
 */

/** A firing's webhook id: `msg_` + 32 hex of SHA-256 over its run key (job_id, scheduled_for). */
export async function webhookIdFor(jobId: string, scheduledFor: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`${jobId}\n${scheduledFor}`)));
  return `msg_${[...digest.slice(0, 16)].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}
