/**
 * The deterministic channel classifier (S1 §2.4): a channel id maps to one
 * channel policy, and so to one L3 prompt. Unknown channels get the most
 * restrictive external policy (fail-closed) and the manifest says so.
 */

export type ChannelPolicyId = "cli_local" | "external_email" | "external_message" | "api_client";

/** What each policy allows, from config-free code (S1 §2.4). */
export const CHANNEL_POLICIES: Readonly<
  Record<ChannelPolicyId, { streaming: boolean; finalOnly: boolean; sendRequiresApproval: boolean }>
> = {
  cli_local: { streaming: true, finalOnly: false, sendRequiresApproval: false },
  external_email: { streaming: false, finalOnly: true, sendRequiresApproval: true },
  external_message: { streaming: false, finalOnly: true, sendRequiresApproval: false },
  api_client: { streaming: false, finalOnly: true, sendRequiresApproval: false },
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
