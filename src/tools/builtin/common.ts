/**
 * Helpers the built-in tools share: abort-aware waiting (a call's signal fires
 * when its `timeout_ms` elapses or the run is cancelled), the `timeout`
 * outcome, and cutting UTF-8 text to a byte budget on a character boundary.
 */
import type { ToolContext, ToolOutcome } from "../registry";

export const ABORTED = Symbol("aborted");

/** Settles with the promise, or with ABORTED as soon as the signal fires. */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T | typeof ABORTED> {
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.resolve(ABORTED);
  }
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve(ABORTED);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}

/** The S3 §1 `timeout` outcome of a call whose signal fired. */
export function timedOut(tool: string, ctx: ToolContext): ToolOutcome {
  return {
    ok: false,
    error: { code: "timeout", message: `${tool} did not finish within ${ctx.timeoutMs} ms or was cancelled`, retryable: true },
  };
}

const utf8 = new TextEncoder();

/** UTF-8 length of a string in bytes. */
export function utf8Bytes(text: string): number {
  return utf8.encode(text).length;
}

/** The largest cut ≤ `end` that does not split a UTF-8 sequence. */
export function utf8Boundary(bytes: Uint8Array, end: number): number {
  let start = end;
  // Back over at most three continuation bytes (10xxxxxx) to the sequence's lead byte.
  while (start > 0 && end - start < 3 && ((bytes[start - 1] ?? 0) & 0xc0) === 0x80) start--;
  if (start === 0) return end;
  const lead = bytes[start - 1] ?? 0;
  const length = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return end - (start - 1) >= length ? end : start - 1;
}

/** `text` cut to at most `maxBytes` UTF-8 bytes on a character boundary, and whether it was cut. */
export function capUtf8(text: string, maxBytes: number): { text: string; truncated: boolean } {
  // Each UTF-16 code unit is at most 3 UTF-8 bytes: short strings need no encoding.
  if (text.length * 3 <= maxBytes) return { text, truncated: false };
  const bytes = utf8.encode(text);
  if (bytes.length <= maxBytes) return { text, truncated: false };
  const cut = utf8Boundary(bytes, maxBytes);
  return { text: new TextDecoder().decode(bytes.subarray(0, cut)), truncated: true };
}

/** The first `limit` bytes of a stream (fewer if it ends first); the rest is never read. */
export async function readAtMost(
  body: ReadableStream<Uint8Array>,
  limit: number,
  signal: AbortSignal,
): Promise<Uint8Array | typeof ABORTED> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  let done = false;
  try {
    while (total < limit) {
      const next = await untilAborted(reader.read(), signal);
      if (next === ABORTED) return ABORTED;
      if (next.done) {
        done = true;
        break;
      }
      chunks.push(next.value);
      total += next.value.byteLength;
    }
  } finally {
    if (!done) reader.cancel().catch(() => {});
  }
  const out = new Uint8Array(Math.min(total, limit));
  let at = 0;
  for (const chunk of chunks) {
    const take = Math.min(chunk.byteLength, out.length - at);
    out.set(chunk.subarray(0, take), at);
    at += take;
    if (at === out.length) break;
  }
  return out;
}
