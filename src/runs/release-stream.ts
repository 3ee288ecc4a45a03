/**
 * One RPC per streamed turn (issue 23, D-060): the text a guarded stream releases (src/runs/stream-release.ts)
 * crosses from the SessionDO to the route as ONE ReadableStream, answered by one RPC (`releaseStream`), instead of
 * one `releasedText` long poll per release (about one per 8 words).
 *
 * The stream carries frames, one JSON object per line: each is what one long poll answered — the text released
 * since the previous frame, where the current model call's text starts, whether the guard tripped — and the last
 * (`end`) also carries the run. Workers RPC carries only byte streams, and a byte stream may split or join writes,
 * hence the lines. The object writes a frame when text is released, the guard trips, the run ends or pauses, or
 * after `quietMs` without any (so the route can renew its open-stream slot and write its heartbeat), and ends the
 * stream after `untilMs`. A route that goes away cancels the stream; the run is not touched.
 */
import type { ReleasedSlice } from "./stream-release";

/** One line of a release stream. `run` is sent only on the last frame (the run is read again for every frame). */
interface Frame<R> {
  text: string;
  roundStart: number;
  blocked: boolean;
  end?: true;
  run?: R | null;
}

/** Stream options: a frame at least every `quietMs`, the stream ended after `untilMs`; text from offset `after` (0). */
export interface ReleaseStreamOptions {
  quietMs: number;
  untilMs: number;
  after?: number;
}

/**
 * The object's side: frames from `poll` (the in-object long poll, `awaitRelease`) until the run ends or pauses
 * (`settled`), the guard trips or `untilMs` passes. Pulled: the next poll starts only when the reader wants more.
 */
export function releaseFrames<R>(
  poll: (after: number, waitMs: number) => Promise<ReleasedSlice<R>>,
  settled: (run: R) => boolean,
  o: ReleaseStreamOptions,
): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const deadline = Date.now() + Math.max(0, o.untilMs);
  let after = o.after ?? 0;
  let cancelled = false;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const slice = await poll(after, Math.max(0, Math.min(o.quietMs, deadline - Date.now())));
        if (cancelled) return; // the reader went away while we waited: nothing to write to
        after += slice.text.length;
        const end = slice.blocked || slice.run === null || settled(slice.run) || Date.now() >= deadline;
        const frame: Frame<R> = { text: slice.text, roundStart: slice.roundStart, blocked: slice.blocked };
        if (end) Object.assign(frame, { end: true, run: slice.run });
        controller.enqueue(encoder.encode(`${JSON.stringify(frame)}\n`));
        if (end) controller.close();
      },
      cancel() {
        cancelled = true;
      },
    },
    { highWaterMark: 0 },
  );
}

/** The route's side of a release stream, opened on the first `next()`. */
export interface ReleaseReader<R> {
  /** The next frame as a slice (`run`: the last one seen until the last frame); `end` on the last one. */
  next(): Promise<ReleasedSlice<R>>;
  /** Cancels the stream unless it has ended (the client went away, the slot was lost); never throws. */
  close(): Promise<void>;
}

/** Reads the frames of the stream `open` answers (the one RPC); `initial` is the run as the route last saw it. */
export function releaseReader<R>(open: () => Promise<ReadableStream<Uint8Array>>, initial: R | null): ReleaseReader<R> {
  const decoder = new TextDecoder();
  let reader: ReadableStreamDefaultReader<Uint8Array> | null = null;
  let buffer = "";
  let last: ReleasedSlice<R> = { text: "", roundStart: 0, blocked: false, run: initial };
  let ended = false;
  const line = async (): Promise<string> => {
    reader ??= (await open()).getReader();
    for (let nl = buffer.indexOf("\n"); nl < 0; nl = buffer.indexOf("\n")) {
      const { done, value } = await reader.read();
      // A stream always ends with its `end` frame; ending before it means the object went away.
      if (done) throw new Error("the release stream ended before its last frame");
      buffer += decoder.decode(value, { stream: true });
    }
    const nl = buffer.indexOf("\n");
    const text = buffer.slice(0, nl);
    buffer = buffer.slice(nl + 1);
    return text;
  };
  return {
    async next() {
      if (ended) return { ...last, text: "", end: true };
      const frame = JSON.parse(await line()) as Frame<R>;
      ended = frame.end === true;
      last = {
        text: frame.text,
        roundStart: frame.roundStart,
        blocked: frame.blocked,
        run: ended ? (frame.run ?? null) : last.run,
        end: ended,
      };
      return last;
    },
    async close() {
      if (ended || !reader) return;
      ended = true;
      await reader.cancel().catch(() => {}); // the object's side may be gone already: nothing to undo
    },
  };
}
