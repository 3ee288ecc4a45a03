// Entry bundled by scripts/build.mjs to validate config/gateway.json5 with the Worker's own code.
export { formatConfigIssues } from "../src/config/issues";
export { parseGatewayConfig } from "../src/config/parse";
