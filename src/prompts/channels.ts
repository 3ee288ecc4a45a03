/**
 * The deterministic channel classifier (S1 §2.4): a channel id maps to one
 * channel policy, and so to one L3 prompt. Unknown channels get the most
 * restrictive external policy (fail-closed) and the manifest says so.
 */

export type ChannelPolicyId = "cli_local" | "external_email" | "external_message" | "api_client";

/**
 * What each policy makes the runtime do (S1 §2.4). Only `sendRequiresApproval` is a switch: `decide` and the
 * gate read it for `message.send`. Streaming and final-only are not flags: no channel ever receives partial
 * content (see docs/decisions.md, "Channel policy: every channel is final-only").
 */
export const CHANNEL_POLICIES: Readonly<Record<ChannelPolicyId, { sendRequiresApproval: boolean }>> = {
  cli_local: { sendRequiresApproval: false },
  external_email: { sendRequiresApproval: true },
  external_message: { sendRequiresApproval: false },
  api_client: { sendRequiresApproval: false },
};

const KNOWN: Readonly<Record<string, ChannelPolicyId>> = {
  cli: "cli_local",
  local: "cli_local",
  dev: "cli_local",
  email: "external_email",
  gmail: "external_email",
  smtp: "external_email",
  imap: "external_email",
  telegram: "external_message",
  slack: "external_message",
  whatsapp: "external_message",
  discord: "external_message",
  signal: "external_message",
  matrix: "external_message",
  sms: "external_message",
  standard: "external_message",
  webhook: "external_message",
  http: "api_client",
  openai: "api_client",
  job: "api_client",
};

export interface ChannelClassification {
  policy: ChannelPolicyId;
  /** False when the channel was unknown and got the fail-closed default. */
  known: boolean;
}

/** Classifies a channel id (case-insensitive); unknown ids → `external_message`, `known: false`. */
export function classifyChannel(channel: string): ChannelClassification {
  const policy = Object.hasOwn(KNOWN, channel.toLowerCase()) ? KNOWN[channel.toLowerCase()] : undefined;
  return policy ? { policy, known: true } : { policy: "external_message", known: false };
}

/**
 * The first of `channels` (the run's channel, the send's target channel) whose policy requires approval for
 * every send (S1 §2.4 `external_email`), or null. Such a send needs a human even where the honeypot exception
 * or the risk-class policy would let it go.
 */
export function sendApprovalChannel(channels: readonly unknown[]): string | null {
  for (const channel of channels)
    if (typeof channel === "string" && CHANNEL_POLICIES[classifyChannel(channel).policy].sendRequiresApproval) return channel;
  return null;
}
