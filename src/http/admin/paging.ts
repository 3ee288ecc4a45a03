/**
 * The one paging convention of every list of the API (issue 11; docs/api.md "Lists"):
 *
 *   ?limit=   rows per page, 1…200 (default 50; a list may allow more, and says so)
 *   ?cursor=  the `next_cursor` of the previous page; absent for the first page
 *   →         `{<items>: [...], next_cursor: string | null}`, `null` on the last page
 *
 * Pages are keyset pages: each list orders its rows by a stable, unique sort key, and a cursor is the
 * base64url of JSON `[list, ...sort key of the last row served]`. The next page is "the rows after that key",
 * so rows added or removed between two requests never make a page repeat or skip a row that was there
 * (never OFFSET). A cursor that does not decode, is not canonical, or names another list (another route, or
 * another session's or job's rows) is `400 invalid.request` "cursor is not valid for this list". A list's route
 * reads its page with `serve`, which asks the list's query for one row more than the page to know whether another follows.
 */
import { z } from "@hono/zod-openapi";
import { GatewayError } from "../../errors";
import { ErrorEnvelopeSchema } from "../router";

export const DEFAULT_PAGE_LIMIT = 50;
export const MAX_PAGE_LIMIT = 200;

export const INVALID_CURSOR = "cursor is not valid for this list";

/** One part of a sort key. */
type KeyPart = string | number;
type KeyShape<K extends readonly KeyPart[]> = { readonly [I in keyof K]: K[I] extends number ? "number" : "string" };

/** The `limit` and `cursor` query fields, for a list's query schema (`z.object({...pageQuery(), ...filters})`). */
export function pageQuery(maxLimit = MAX_PAGE_LIMIT) {
  return {
    limit: z.coerce
      .number()
      .int()
      .min(1)
      .max(maxLimit)
      .default(DEFAULT_PAGE_LIMIT)
      .openapi({ description: `Rows per page, 1–${maxLimit} (default ${DEFAULT_PAGE_LIMIT})` }),
    cursor: z.string().optional().openapi({ description: "The `next_cursor` of the previous page (opaque); omit it for the first page" }),
  };
}

/** The 400 a list documents: a query field out of range, or a cursor that is not this list's. */
export const invalidListQuery = {
  description: "Invalid query or cursor",
  content: { "application/json": { schema: ErrorEnvelopeSchema } },
};

/** The `next_cursor` field of a list's response. */
export const NextCursor = z
  .string()
  .nullable()
  .openapi({ description: "Pass as `?cursor=` to get the next page; `null` on the last page" });

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

function toBase64url(text: string): string {
  let binary = "";
  for (const byte of utf8.encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function fromBase64url(text: string): string {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) throw new Error("not base64url");
  const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
  return fromUtf8.decode(Uint8Array.from(binary, (c) => c.charCodeAt(0)));
}

/** The cursor that resumes list `list` after a row whose sort key is `key`. */
export function encodeCursor(list: string, key: readonly KeyPart[]): string {
  return toBase64url(JSON.stringify([list, ...key]));
}

const invalidCursor = () => new GatewayError("invalid.request", INVALID_CURSOR);

/** The query fields `serve` reads: `pageQuery()`'s, validated. */
export interface PageQuery {
  cursor?: string | undefined;
  limit: number;
}

/** A page of rows to serve and the cursor of the next one (`null` on the last page). */
export interface Page<Row> {
  items: Row[];
  next_cursor: string | null;
}

/** Keyset paging of one list: its name in cursors, the shape of its sort key, and a row's key. */
export interface Keyset<Row, K extends readonly KeyPart[]> {
  /**
   * The page `query` asks for. `fetch` reads up to `limit` rows in list order after `after` (undefined: from the
   * start) — it is asked for one row more than the page holds, which tells whether another page follows. A cursor
   * not of this list is 400 before `fetch` runs.
   */
  serve(query: PageQuery, fetch: (after: K | undefined, limit: number) => Promise<readonly Row[]>): Promise<Page<Row>>;
}

/** The keyset paging of list `list` (e.g. "runs", or "messages:<session_id>" for one session's messages). */
export function keyset<Row, K extends readonly KeyPart[]>(list: string, shape: KeyShape<K>, keyOf: (row: Row) => K): Keyset<Row, K> {
  const after = (cursor: string | undefined): K | undefined => (cursor === undefined ? undefined : decodeCursor(list, shape, cursor));
  return {
    async serve(query, fetch) {
      const rows = await fetch(after(query.cursor), query.limit + 1);
      const items = rows.slice(0, query.limit);
      const last = items.at(-1);
      return { items, next_cursor: rows.length > query.limit && last !== undefined ? encodeCursor(list, keyOf(last)) : null };
    },
  };
}

/** The sort key a cursor of list `list` resumes after; 400 for one that does not decode, is not canonical or is another list's. */
function decodeCursor<K extends readonly KeyPart[]>(list: string, shape: KeyShape<K>, cursor: string): K {
  let parsed: unknown;
  try {
    parsed = JSON.parse(fromBase64url(cursor));
  } catch {
    throw invalidCursor();
  }
  if (!Array.isArray(parsed) || parsed.length !== shape.length + 1 || parsed[0] !== list) throw invalidCursor();
  const key = parsed.slice(1);
  const types: readonly string[] = shape;
  for (const [i, part] of key.entries()) {
    const ok = types[i] === "number" ? Number.isSafeInteger(part) : typeof part === "string";
    if (!ok) throw invalidCursor();
  }
  // Only the encoding this module produces: one position has one cursor.
  if (encodeCursor(list, key) !== cursor) throw invalidCursor();
  return key as unknown as K;
}
