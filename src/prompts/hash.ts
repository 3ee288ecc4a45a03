/** SHA-256 as lower-case hex, over UTF-8 text or raw bytes (WebCrypto: stable across platforms, S1 §4.3). */

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/** SHA-256 of `data` (a string is hashed as its UTF-8 bytes), as 64 lower-case hex characters. */
export async function sha256Hex(data: string | Uint8Array): Promise<string> {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  let out = "";
  for (const b of digest) out += HEX[b];
  return out;
}
