/**
 * S4 §4 filesystem tools: `fs.list_dir`, `fs.read_text` (S3's `fs.read` is an
 * alias) and `fs.write_text` (S3's `fs.write`). They see only the agent's
 * `{agentId}/` prefix of the WORKSPACE bucket; every path goes through
 * `resolveWorkspacePath` first and an escape is `policy.denied`. R2 has no
 * directories: a "directory" is a key prefix ending in `/`, and a path with
 * nothing under it lists as empty.
 *
 * `fs.write_text` is `side_effect` (S1 §3.3 Phase 1: every outbound write needs
 * an approval). Without `overwrite` it is create-only in R2 itself
 * (`etagDoesNotMatch: "*"`), so two racing writers cannot both create a file.
 */
import { z } from "zod";
import { type PathRefusal, resolveWorkspacePath } from "../paths";
import { defineTool, type ToolDefinition, type ToolOutcome } from "../registry";
import { ABORTED, readAtMost, timedOut, untilAborted, utf8Boundary } from "./common";

const ListDirInput = z.strictObject({
  path: z.string().max(1024).default(".").describe("Directory to list, relative to the workspace root"),
  max_entries: z.int().min(1).max(1000).default(200).describe("Most entries to return"),
});

const ReadTextInput = z.strictObject({
  path: z.string().min(1).max(1024).describe("File to read, relative to the workspace root"),
  max_bytes: z.int().min(1).max(1_000_000).default(20_000).describe("Most bytes of the file to return"),
});

/** S4 §4 `fs.write_text`: the most UTF-8 bytes one call may write (1 MiB). */
export const MAX_WRITE_BYTES = 1_048_576;

const WriteTextInput = z.strictObject({
  path: z.string().min(1).max(1024).describe("File to write, relative to the workspace root"),
  text: z.string().max(MAX_WRITE_BYTES).describe("The whole content of the file, at most 1 MiB of UTF-8"),
  overwrite: z
    .boolean()
    .default(false)
    .describe("Replace the file if it exists; when false, an existing file is left as it is and the call fails"),
});

/** One child of a listed directory; `size` (bytes) only for files. */
export interface DirEntry {
  name: string;
  type: "file" | "dir";
  size?: number;
}

export const fsListDir: ToolDefinition = defineTool({
  name: "fs.list_dir",
  description:
    "List the files and directories directly inside a workspace directory. Paths are relative to the workspace root; '.' is the root.",
  input: ListDirInput,
  risk: "read_only",
  handler: async (input, ctx) => {
    const { max_entries: maxEntries } = input;
    const resolved = resolveWorkspacePath(ctx.agentId, input.path);
    if (!resolved.ok) return refused(resolved.reason);
    const shown = resolved.relative || ".";
    const prefix = resolved.relative ? `${resolved.key}/` : resolved.key;
    const bucket = ctx.env.WORKSPACE;

    // Keep listing past max_entries by one so `truncated` is exact; R2 may return
    // short pages while still truncated, so follow the cursor, not the counts.
    const entries: DirEntry[] = [];
    const dirs = new Set<string>();
    let cursor: string | undefined;
    do {
      const page = await untilAborted(
        bucket.list({ prefix, delimiter: "/", limit: Math.min(1000, maxEntries + 1 - entries.length), ...(cursor ? { cursor } : {}) }),
        ctx.signal,
      );
      if (page === ABORTED) return timedOut("fs.list_dir", ctx);
      for (const obj of page.objects) {
        const name = obj.key.slice(prefix.length);
        if (name) entries.push({ name, type: "file", size: obj.size });
      }
      for (const dir of page.delimitedPrefixes) {
        const name = dir.slice(prefix.length, -1);
        if (name && !dirs.has(name)) {
          dirs.add(name);
          entries.push({ name, type: "dir" });
        }
      }
      cursor = page.truncated ? page.cursor : undefined;
    } while (cursor && entries.length <= maxEntries);

    if (entries.length === 0 && resolved.relative) {
      const file = await untilAborted(bucket.head(resolved.key), ctx.signal);
      if (file === ABORTED) return timedOut("fs.list_dir", ctx);
      if (file) return { ok: false, error: { code: "tool.input_invalid", message: `${shown} is a file, not a directory` } };
    }

    entries.sort((a, b) => byCodePoint(a.name, b.name) || byCodePoint(a.type, b.type));
    const truncated = entries.length > maxEntries;
    const listed = entries.slice(0, maxEntries);
    const count = `${listed.length} ${listed.length === 1 ? "entry" : "entries"}`;
    return {
      ok: true,
      output: { path: shown, entries: listed, truncated },
      summary: `${count} in ${shown}${truncated ? " (truncated)" : ""}`,
    };
  },
});

export const fsReadText: ToolDefinition = defineTool({
  name: "fs.read_text",
  aliases: ["fs.read"],
  description:
    "Read a UTF-8 text file from the workspace. Returns at most max_bytes bytes, cut on a character boundary; truncated says whether the file is longer.",
  input: ReadTextInput,
  risk: "read_only",
  handler: async (input, ctx) => {
    const { max_bytes: maxBytes } = input;
    const resolved = resolveWorkspacePath(ctx.agentId, input.path);
    if (!resolved.ok) return refused(resolved.reason);
    const shown = resolved.relative;
    if (!shown) return { ok: false, error: { code: "tool.input_invalid", message: "path names the workspace root, not a file" } };
    const bucket = ctx.env.WORKSPACE;

    const obj = await untilAborted(bucket.get(resolved.key), ctx.signal);
    if (obj === ABORTED) return timedOut("fs.read_text", ctx);
    if (!obj) {
      const under = await untilAborted(bucket.list({ prefix: `${resolved.key}/`, limit: 1 }), ctx.signal);
      if (under === ABORTED) return timedOut("fs.read_text", ctx);
      const message = under.objects.length > 0 ? `${shown} is a directory; use fs.list_dir` : `no file at ${shown}`;
      return { ok: false, error: { code: "tool.input_invalid", message } };
    }

    const head = await readAtMost(obj.body, maxBytes, ctx.signal);
    if (head === ABORTED) return timedOut("fs.read_text", ctx);
    const truncated = obj.size > maxBytes;
    const bytes = truncated ? head.subarray(0, utf8Boundary(head, head.length)) : head;
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
    } catch {
      return { ok: false, error: { code: "tool.input_invalid", message: `${shown} is not a text file` } };
    }
    // Valid UTF-8 can still be binary; NUL never appears in text a model should read.
    if (text.includes("\u0000")) return { ok: false, error: { code: "tool.input_invalid", message: `${shown} is not a text file` } };
    return {
      ok: true,
      output: { path: shown, text, bytes: bytes.length, truncated },
      summary: truncated ? `read ${bytes.length} of ${obj.size} bytes from ${shown}` : `read ${bytes.length} bytes from ${shown}`,
    };
  },
});

export const fsWriteText: ToolDefinition = defineTool({
  name: "fs.write_text",
  aliases: ["fs.write"],
  description:
    "Write a UTF-8 text file in the workspace, creating it or, with overwrite: true, replacing it. Paths are relative to the workspace root; parent directories need not exist.",
  input: WriteTextInput,
  risk: "side_effect",
  handler: async (input, ctx) => {
    const resolved = resolveWorkspacePath(ctx.agentId, input.path);
    if (!resolved.ok) return refused(resolved.reason);
    const shown = resolved.relative;
    if (!shown) return { ok: false, error: { code: "tool.input_invalid", message: "path names the workspace root, not a file" } };
    const body = new TextEncoder().encode(input.text);
    if (body.length > MAX_WRITE_BYTES)
      return { ok: false, error: { code: "tool.input_invalid", message: `text is longer than ${MAX_WRITE_BYTES} bytes (1 MiB)` } };
    // fs.read_text refuses NUL as binary; refusing it here keeps every written file readable.
    if (input.text.includes("\u0000"))
      return { ok: false, error: { code: "tool.input_invalid", message: "text contains a NUL character; only text files can be written" } };
    const bucket = ctx.env.WORKSPACE;

    const under = await untilAborted(bucket.list({ prefix: `${resolved.key}/`, limit: 1 }), ctx.signal);
    if (under === ABORTED) return timedOut("fs.write_text", ctx);
    if (under.objects.length > 0) return { ok: false, error: { code: "tool.input_invalid", message: `${shown} is a directory` } };

    const options = { httpMetadata: { contentType: "text/plain; charset=utf-8" } };
    // Create-only first, in R2 itself: of two racing writers only one can create the file.
    const created = await untilAborted(bucket.put(resolved.key, body, { ...options, onlyIf: { etagDoesNotMatch: "*" } }), ctx.signal);
    if (created === ABORTED) return timedOut("fs.write_text", ctx);
    if (!created) {
      if (!input.overwrite)
        return { ok: false, error: { code: "tool.input_invalid", message: `${shown} exists; pass overwrite: true to replace it` } };
      const replaced = await untilAborted(bucket.put(resolved.key, body, options), ctx.signal);
      if (replaced === ABORTED) return timedOut("fs.write_text", ctx);
    }
    return {
      ok: true,
      output: { path: shown, bytes: body.length, created: created !== null },
      summary: `wrote ${body.length} bytes to ${shown}`,
    };
  },
});

/** Maps a refused path to its public error; the reason itself stays internal. */
function refused(reason: PathRefusal): ToolOutcome {
  switch (reason) {
    case "too_long":
      return { ok: false, error: { code: "tool.input_invalid", message: "path is longer than 1024 bytes" } };
    case "invalid_agent_id":
      return { ok: false, error: { code: "policy.denied", message: "this agent has no workspace" } };
    case "control_character":
    case "backslash":
    case "absolute":
    case "traversal":
    case "encoded_traversal":
      return { ok: false, error: { code: "policy.denied", message: "path escapes the workspace" } };
  }
}

/** Orders strings by Unicode code point, which is R2's (UTF-8 byte) key order. */
function byCodePoint(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = (x[i]?.codePointAt(0) ?? 0) - (y[i]?.codePointAt(0) ?? 0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}
