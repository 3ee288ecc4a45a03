/**
 * Outbound channel adapters: what `message.send` hands a message to. Each
 * channel adapter (Telegram, Slack, email, …) implements `ChannelSender` and
 * registers itself under its channel name in `channelSenders`, a module-level
 * registry like the tool registry. A channel with no sender cannot be sent to;
 * `message.send` says so and sends nothing.
 *
 * A sender resolves with the platform's message id once the platform accepted
 * the message, and rejects otherwise. Its error text is for logs only: callers
 * never show it to the model or a channel (S1 §3.4).
 */

/** Channel names, as in session keys (`telegram`, `slack`, `http`, …). */
export const CHANNEL_NAME = /^[a-z][a-z0-9_-]{0,31}$/;

export interface OutboundAttachment {
  name: string;
  url: string;
}

export interface OutboundMessage {
  /** The recipient's id on the channel (user, group or channel id, or an email address). */
  to: string;
  /** `user`, `group`, `channel` or `email`. */
  recipientType: string;
  /** The final text, already rendered. */
  text: string;
  attachments: readonly OutboundAttachment[];
}

export interface SendContext {
  agentId: string;
  /** Aborted when the tool call times out or the run is cancelled. */
  signal: AbortSignal;
  /** The Worker env (bot tokens are read from it at send time). */
  env?: Env;
  /** The channel platform's API base URL when the channel is enabled in the run's configuration. */
  apiBaseUrl?: string | undefined;
  /** Where the deployment's config sends each bot token: a token is sent only to the origin it is bound to. */
  secretOrigins?: Readonly<Record<string, string>> | undefined;
}

export interface ChannelSender {
  send(msg: OutboundMessage, ctx: SendContext): Promise<{ messageId: string }>;
}

/** Senders by channel name. */
export class ChannelSenderRegistry {
  readonly #byChannel = new Map<string, ChannelSender>();

  /** Registers `sender` for `channel`; registering the same sender again is a no-op, a different one throws. */
  register(channel: string, sender: ChannelSender): this {
    if (!CHANNEL_NAME.test(channel)) throw new Error(`invalid channel name "${channel.slice(0, 64)}"`);
    const existing = this.#byChannel.get(channel);
    if (existing && existing !== sender) throw new Error(`channel "${channel}" already has a sender`);
    this.#byChannel.set(channel, sender);
    return this;
  }

  get(channel: string): ChannelSender | undefined {
    return this.#byChannel.get(channel);
  }

  /** Removes a channel's sender (tests register short-lived ones). */
  unregister(channel: string): void {
    this.#byChannel.delete(channel);
  }

  /** Channels with a sender, sorted. */
  channels(): string[] {
    return [...this.#byChannel.keys()].sort();
  }
}

/** The gateway's senders. Channel adapters add themselves when their module loads. */
export const channelSenders = new ChannelSenderRegistry();
