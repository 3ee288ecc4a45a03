/**
 * The configuration in force for this isolate. Today that is the bundled
 * config/gateway.json5 (validated at build time, parsed once here so defaults
 * apply); admin-posted config versions will layer on top of it.
 */
import { BUNDLED_CONFIG } from "../generated/config";
import { formatConfigIssues } from "./issues";
import { parseGatewayConfig } from "./parse";
import type { GatewayConfig } from "./schema";

let bundled: GatewayConfig | undefined;

/** The bundled configuration, parsed once per isolate. */
export function bundledConfig(): GatewayConfig {
  if (bundled) return bundled;
  const result = parseGatewayConfig(BUNDLED_CONFIG);
  // The build refuses an invalid file, so this only fires if the generated module was edited by hand.
  if (!result.ok) throw new Error(formatConfigIssues("config/gateway.json5 (bundled)", result.issues));
  bundled = result.value;
  return bundled;
}
