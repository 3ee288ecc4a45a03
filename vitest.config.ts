import { fileURLToPath } from "node:url";
import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-plugin";
import { defineConfig, type ViteUserConfig } from "vitest/config";
import { build } from "./scripts/build.mjs";
import { outboundService } from "./test/support/outbound.ts";

/** Secrets every workers test sees; tests that need others pass their own env. */
export const TEST_SECRETS = {
  GATEWAY_ADMIN_TOKEN: "test-admin-token-0123456789abcdef",
  GATEWAY_API_TOKENS: "alice:test-api-token-alice-0123456789,bob:test-api-token-bob-0123456789ab",
  // Runs execute in the SessionDO, which reads the provider key from its own env (the mock provider accepts any key).
  MOONSHOT_API_KEY: "sk-test-moonshot-key-0123456789abcdef",
  // A channel secret, so the leak scan can prove it never lands anywhere.
  TELEGRAM_BOT_TOKEN: "7000000001:AAcanaryCanaryCanaryCanaryCanary0123",
  // Chat channels (issue 10).
  TELEGRAM_WEBHOOK_SECRET: "telegram-webhook-secret_0123456789",
  SLACK_SIGNING_SECRET: "slacksigningsecret0123456789abcdef",
  SLACK_BOT_TOKEN: "xoxb-test.canary.slack.bot.token",
  // Discord's bot token, only for job reports to a channel (issue 24 §1, D-076); a canary like the others.
  DISCORD_BOT_TOKEN: "MTEwMDAwMDAwMDAwMDAwMDAwMQ.canary.DiscordBotTokenCanary0123456789",
  STANDARD_WEBHOOK_SECRET: "whsec_c3RhbmRhcmQtY2hhbm5lbC10ZXN0LWtleQ==",
  // Encrypts the admin secrets store (base64 of 32 bytes).
  SECRETS_ENCRYPTION_KEY: "c2VjcmV0cy1lbmNyeXB0aW9uLWtleS0zMi1ieXRlcyE=",
  // Signs sandbox tokens for the S5 tool-callback routes.
  SANDBOX_TOKEN_SECRET: "test-sandbox-token-secret-0123456789abcdef",
  // The master each webhook endpoint's v1 key is derived from (Standard Webhooks, D-089); 26 key bytes.
  SCHEDULER_WEBHOOK_SECRET: "whsec_c2NoZWR1bGVyLXdlYmhvb2stdGVzdC1rZXk=",
  // The gateway's Ed25519 signing key (v1a webhook signatures, the JWKS; issue 33, D-089); a canary like the others.
  GATEWAY_SIGNING_KEY:
    '{"kty":"OKP","crv":"Ed25519","kid":"test-signing-2030","x":"JMXfJyTabkmsag2OJp2P2bCdPlCcJsxgvxPwqOvvEp4","d":"Kl5MpKtiqxD4_lFn0jyorRx9Ac483ukfog-fGfXE67A"}',
};

// Tests never reach the internet: Miniflare uses its built-in Request.cf placeholder instead of fetching one.
process.env.CLOUDFLARE_CF_FETCH_ENABLED = "false";

export default defineConfig(async () => {
  // Same step as wrangler's [build]: validates config/gateway.json5 and writes src/generated/.
  // An invalid bundled config fails the test run here, with one line saying what and where.
  try {
    await build();
  } catch (err) {
    console.error(`build failed: ${(err as Error).message}`);
    process.exit(1);
  }
  const migrations = await readD1Migrations("migrations");
  const config: ViteUserConfig = {
    test: {
      // The JSON report is what .ci/run summarises into its closing "N passed, N failed" line.
      reporters: ["default", ["json", { outputFile: "test-results/vitest.json" }]],
      projects: [
        {
          plugins: [
            cloudflareTest({
              wrangler: { configPath: "./wrangler.toml" },
              remoteBindings: false,
              miniflare: {
                bindings: {
                  ...TEST_SECRETS,
                  TEST_MIGRATIONS: migrations,
                  LOAD_SESSIONS: process.env.LOAD_SESSIONS ?? "20",
                  // Turns the issue 23 counting test runs (test/observability/turn-counts.test.ts; bench/counts.bench.ts sets it).
                  COUNT_TURNS: process.env.COUNT_TURNS ?? "24",
                },
                outboundService,
              },
            }),
          ],
          // wrangler.toml's [alias]: the tests validate with the zod module production bundles (src/vendor/zod.ts).
          resolve: { alias: [{ find: /^zod$/, replacement: fileURLToPath(new URL("./src/vendor/zod.ts", import.meta.url)) }] },
          test: {
            name: "workers",
            include: ["test/**/*.test.ts"],
            exclude: ["test/build/**", "test/browser/**"],
            // apply-migrations: D1 before each file; test-hosts: the mock network's `.test` names pass the URL check (D-088).
            setupFiles: ["./test/support/apply-migrations.ts", "./test/support/test-hosts.ts"],
          },
        },
        {
          test: {
            name: "build",
            include: ["test/build/**/*.test.ts"],
            environment: "node",
          },
        },
        {
          // The admin dashboard end to end in Debian's Chromium (scripts/chromium.sh installs it when missing)
          // against a local gateway (test/browser/gateway.ts). Slow: one file, its tests in order.
          test: {
            name: "browser",
            include: ["test/browser/**/*.test.ts"],
            environment: "node",
            fileParallelism: false,
            sequence: { concurrent: false },
            testTimeout: 120_000,
            hookTimeout: 600_000,
          },
        },
      ],
    },
  };
  return config;
});
