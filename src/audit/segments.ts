/**
 * Audit segments on R2 (DESIGN §4): `agents/{agentId}/audit/{YYYY-MM-DD}/{segment}.jsonl`, written
 * create-only and never rewritten. A segment's name is `{its first event's time ms, 13 digits}-{stream}-{counter,
 * 6 digits}` (D-064: derived from what is durable, so a repeated flush names it the same; segments written before
 * carry their flush time in the same place), so names sort in the order their events happened. A stream is one
 * SessionDO (its id); each stream numbers its segments of a day 1, 2, 3… and each segment's first line records the
 * SHA-256 of the stream's previous segment that day (zeros for the first): a hash chain, so an edited, removed or
 * re-ordered segment is detected. The event lines that follow are S3 §3 audit events, one per line.
 */
import { sha256Hex } from "../prompts/hash";
import { AuditEvent } from "./event";

export const GENESIS = "0".repeat(64);

export interface SegmentHeader {
  segment: { stream: string; counter: number; prev_sha256: string; events: number };
}

const KEY = /^agents\/([^/]+)\/audit\/(\d{4}-\d{2}-\d{2})\/(\d{13})-([0-9a-f]{64})-(\d{6})\.jsonl$/;

export const auditPrefix = (agentId: string, day: string): string => `agents/${agentId}/audit/${day}/`;

/** A segment's object key: `at` is its first event's time in ms (see the module comment). */
export function segmentKey(agentId: string, day: string, at: number, stream: string, counter: number): string {
  return `${auditPrefix(agentId, day)}${String(at).padStart(13, "0")}-${stream}-${String(counter).padStart(6, "0")}.jsonl`;
}

export function parseSegmentKey(key: string): { agentId: string; day: string; stream: string; counter: number } | null {
  const m = KEY.exec(key);
  return m ? { agentId: m[1] as string, day: m[2] as string, stream: m[4] as string, counter: Number(m[5]) } : null;
}

/** The bytes of a segment: the header line, then one line per event. */
export function segmentBody(header: SegmentHeader["segment"], events: readonly AuditEvent[]): string {
  return `${[JSON.stringify({ segment: header }), ...events.map((e) => JSON.stringify(e))].join("\n")}\n`;
}

export const segmentSha256 = (body: string): Promise<string> => sha256Hex(body);

/** The events of a segment body (the header line skipped). */
export function segmentEvents(body: string): AuditEvent[] {
  return body
    .split("\n")
    .slice(1)
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as AuditEvent);
}

export interface ChainProblem {
  stream: string;
  key: string | null;
  problem: string;
}

export interface StreamHead {
  counter: number;
  sha256: string;
}

/**
 * Verifies the segments of one agent/day: per stream, counters 1…n without gaps, each header's
 * `prev_sha256` equal to the SHA-256 of the previous segment, every line a valid audit event, and — when the
 * stream's own record of its head is known — the segment numbered like the head equal to it (a removed tail
 * shows). Segments past the head are accepted: with heads read before the segments are listed, they are ones
 * a flush wrote in between, not tampering.
 * Returns the first problem (in key order), or null.
 */
export async function verifySegments(
  segments: readonly { key: string; body: string }[],
  heads: ReadonlyMap<string, StreamHead> = new Map(),
): Promise<{ ok: true; segments: number; events: number; streams: number } | { ok: false; first: ChainProblem }> {
  const byStream = new Map<string, { key: string; body: string; counter: number }[]>();
  for (const s of [...segments].sort((a, b) => a.key.localeCompare(b.key))) {
    const parsed = parseSegmentKey(s.key);
    if (!parsed) return { ok: false, first: { stream: "?", key: s.key, problem: "not an audit segment name" } };
    byStream.set(parsed.stream, [...(byStream.get(parsed.stream) ?? []), { ...s, counter: parsed.counter }]);
  }
  let events = 0;
  const problems: ChainProblem[] = [];
  for (const [stream, list] of byStream) {
    list.sort((a, b) => a.counter - b.counter);
    let prev = GENESIS;
    let expected = 1;
    const head = heads.get(stream);
    let atHead = head?.counter === 0 ? head.sha256 : null;
    for (const s of list) {
      if (s.counter !== expected) {
        problems.push({ stream, key: s.key, problem: `segment ${expected} of this stream is missing (found ${s.counter})` });
        break;
      }
      let header: SegmentHeader;
      try {
        header = JSON.parse(s.body.slice(0, s.body.indexOf("\n"))) as SegmentHeader;
      } catch {
        problems.push({ stream, key: s.key, problem: "the header line is not JSON" });
        break;
      }
      if (header.segment?.prev_sha256 !== prev) {
        problems.push({ stream, key: s.key, problem: "prev_sha256 does not match the previous segment: edited, removed or re-ordered" });
        break;
      }
      const lines = segmentEvents(s.body);
      if (lines.length !== header.segment.events || lines.some((e) => !AuditEvent.safeParse(e).success)) {
        problems.push({ stream, key: s.key, problem: "the events do not match the header or are not valid audit events" });
        break;
      }
      events += lines.length;
      prev = await segmentSha256(s.body);
      if (head && s.counter === head.counter) atHead = prev;
      expected++;
    }
    if (head && problems.every((p) => p.stream !== stream)) {
      // Segments past the head were written after it was read (the route reads heads before its final listing).
      if (head.counter > expected - 1 || atHead !== head.sha256)
        problems.push({
          stream,
          key: null,
          problem: `the stream wrote ${head.counter} segment(s) but ${expected - 1} chain up to it: the tail is missing or altered`,
        });
    }
  }
  for (const [stream, head] of heads) {
    if (!byStream.has(stream) && head.counter > 0)
      problems.push({ stream, key: null, problem: `all ${head.counter} segment(s) of this stream are missing` });
  }
  if (problems.length > 0) {
    problems.sort((a, b) => (a.key ?? "~").localeCompare(b.key ?? "~"));
    return { ok: false, first: problems[0] as ChainProblem };
  }
  return { ok: true, segments: segments.length, events, streams: byStream.size };
}
