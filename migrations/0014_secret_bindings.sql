-- Issue 20 §5 "Secrets stay where they belong".
-- 1. A stored provider key or channel bot token is bound to the origin it was stored for (sent nowhere else).
--    NULL: bound like a Worker secret, to the origin the deployed config/gateway.json5 names for it (rows
--    stored before this migration, and secrets the gateway never sends anywhere).
ALTER TABLE admin_secrets ADD COLUMN origin TEXT;
-- 2. Rotation overlap for inbound webhook secrets: the value in force before the last write, encrypted like
--    the current one (same name as additional data), and when it was replaced. Accepted for
--    channels.secretRotationOverlapSeconds after `rotated_at`.
ALTER TABLE admin_secrets ADD COLUMN previous_iv TEXT;
ALTER TABLE admin_secrets ADD COLUMN previous_ciphertext TEXT;
ALTER TABLE admin_secrets ADD COLUMN rotated_at TEXT;

-- 3. Sandbox tokens minted by an admin, so that one can be revoked by its token_id (checked on every
--    tool callback). The token itself is never stored.
CREATE TABLE sandbox_tokens (
  token_id TEXT PRIMARY KEY,      -- sbt_… (the token's jti)
  session_id TEXT NOT NULL,
  minted_at TEXT NOT NULL,
  expires_at INTEGER NOT NULL,    -- Unix seconds
  revoked_at TEXT                 -- NULL until revoked
);
CREATE INDEX sandbox_tokens_expiry ON sandbox_tokens (expires_at);
