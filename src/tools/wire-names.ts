/**
 * Tool names on the wire. OpenAI-compatible APIs accept function names of
 * `[a-zA-Z0-9_-]{1,64}` only, so the gateway's dotted names (`fs.read_text`)
 * get a legal wire name (`fs__read_text`) — mapped in one place, both ways,
 * and checked for collisions so that a wire name always means one tool.
 */

const WIRE_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** `fs.read_text` → `fs__read_text` (a double underscore stands for each dot). */
export function toWireName(name: string): string {
  const wire = name.replaceAll(".", "__");
  if (!WIRE_NAME.test(wire)) throw new Error(`tool name "${name}" has no legal wire name`);
  return wire;
}

/** A two-way map for a set of tool names; refuses two names that would share a wire name. */
export function wireNameMap(names: readonly string[]): {
  toWire: (name: string) => string;
  fromWire: (wire: string) => string | undefined;
} {
  const byWire = new Map<string, string>();
  for (const name of names) {
    const wire = toWireName(name);
    const other = byWire.get(wire);
    if (other !== undefined && other !== name) throw new Error(`tools "${other}" and "${name}" would share the wire name "${wire}"`);
    byWire.set(wire, name);
  }
  return {
    toWire: (name) => toWireName(name),
    fromWire: (wire) => byWire.get(wire),
  };
}
