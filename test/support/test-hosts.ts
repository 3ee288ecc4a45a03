// The workers project's second setup file (vitest.config.ts): opens the one escape hatch of the outbound URL check
// (issue 33, D-088) in this isolate, so configs, webhooks and http.get may address the mock network under `.test`
// (test/support/outbound.ts). Only `.test` names: every other refusal stands. Production never calls it
// (test/build/url-escape-hatch.test.ts); tests that need the production answer turn it off around a check.
import { allowTestTldForTests } from "../../src/tools/net-policy";

allowTestTldForTests(true);
