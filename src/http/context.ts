/** Typed context variables every handler can rely on (set by the app's first middleware). */
import type { GatewayConfig } from "../config/schema";
import type { Logger } from "../observability/logger";
import type { StartupValidator } from "../providers/startup-validation";
import type { Principal } from "./auth";

declare module "hono" {
  interface ContextVariableMap {
    /** The configuration in force for this request. */
    config: GatewayConfig;
    /** The typed logger (no free text). */
    logger: Logger;
    /** This isolate's provider readiness (S1 §1.6). */
    startupValidator: StartupValidator;
    /** Set by `requireScope` on authenticated routes. */
    principal: Principal;
  }
}
