/**
 * Guarded token streaming on the WebSocket route (issue 23): a `message` frame sent with `"stream": true` gets the
 * answer's text in `delta` frames while the model writes it, released by the same incremental output guard as
 * `stream: true` on /v1/chat/completions and `deltas=true` on a run's events (src/runs/stream-release.ts, D-054):
 * never text the guard has not passed, and once it trips, the refusal and nothing more. The last delta comes
 * right before the run's terminal event and carries the held last words, taken from the final answer.
 *
 * What a socket was sent of a run's release is kept in the socket's attachment (`SocketStream`), so a hibernated
 * object goes on from there; the released text itself lives in memory only, like every stream's: after an
 * eviction the client gets the final answer whole in the closing delta.
 */
import { disclosureRefusalMessage } from "../prompts/disclosure";
import { forgetRelease, ROUND_SEPARATOR, streamTail, watchRelease } from "../runs/stream-release";

/** What a socket was sent of a streamed run: characters sent, how far into the release they reach, the verdict. */
export interface SocketStream {
  sent: number;
  at: number;
  blocked: boolean;
}

/** The stream state of a run the client asked to stream, before anything is sent. */
export const newSocketStream = (): SocketStream => ({ sent: 0, at: 0, blocked: false });

/**
 * The text released since the last delta, the run watched from now on (`wake` wakes the socket's push when more is
 * released); once the guard trips, what it had released and then the refusal, once. Advances `s`.
 */
export function releasedSince(runId: string, s: SocketStream, wake: () => void): string {
  if (s.blocked) return "";
  const r = watchRelease(runId, wake);
  // A release started again (another reader saw the run pause and forgot it): its text is all new.
  if (r.text.length < s.at) s.at = 0;
  let out = r.text.slice(s.at);
  s.at = r.text.length;
  if (r.blocked) {
    s.blocked = true;
    out += (s.sent + out.length > 0 ? ROUND_SEPARATOR : "") + disclosureRefusalMessage();
  }
  s.sent += out.length;
  return out;
}

/**
 * The closing delta, right before the run's terminal event: what was released last, then the rest of the final
 * answer (`final`: the completed run's output; null for a run that failed or was cancelled, which gets no tail).
 * The run is no longer watched after it.
 */
export function closingDelta(runId: string, s: SocketStream, final: string | null, wake: () => void): string {
  const last = releasedSince(runId, s, wake);
  const r = watchRelease(runId, wake);
  forgetRelease(runId);
  if (s.blocked || final === null) return last;
  let tail = streamTail(r.text, r.roundStart, false, final);
  // The release this object holds may be younger than what the socket has (an eviction): never glue the answer on.
  if (r.text === "" && s.sent > 0 && tail !== "") tail = ROUND_SEPARATOR + tail;
  s.sent += tail.length;
  return last + tail;
}
