/** Typed context variables every handler can rely on (set by the app's first middleware). */
import type { GatewayConfig } from "../config/schema";
import type { ConfigInForce } from "../config/versions";
import type { Logger, RunLine } from "../observability/logger";
import type { StartupValidator } from "../providers/startup-validation";
import type { Principal } from "./middleware/principal";

declare module "hono" {
  interface ContextVariableMap {
    /** The configuration in force for this request. */
    config: GatewayConfig;
    /** Where that configuration comes from: the bundled file or an admin-posted version. */
    configSource: Omit<ConfigInForce, "config">;
    /** The typed logger (no free text). */
    logger: Logger;
    /** This isolate's provider readiness (S1 §1.6). */
    startupValidator: StartupValidator;
    /** Set by `requireScope` on authenticated routes. */
    principal: Principal;
    /** The lines of the run this request waited for, handed back by its SessionDO: printed in the request line (D-068). */
    runLines: RunLine[];
  }
}
