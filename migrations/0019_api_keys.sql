-- Issue 25 §1 (D-077): API keys as records. A key is `sgw_<key_id>_<secret>`; only a salted SHA-256 of the secret
-- is stored (`secret_hash` = SHA-256(salt || secret), hex; `salt` 16 random bytes, hex, new at every rotation), so a
-- read of this table gives nobody a working key. `prefix` is what lists show (`sgw_<key_id>_` and the secret's first
-- 4 characters). `agents` is a JSON array of agent ids, or NULL for every agent. Times are ISO 8601 UTC.
-- Revoking sets `revoked_at`; rotating replaces `salt`, `secret_hash` and `prefix`. Both bump the `keys` counter
-- of `admin_generation`, which every isolate polls (src/storage/admin-generation.ts) to drop its cached lookups.
CREATE TABLE api_keys (
  key_id TEXT PRIMARY KEY,            -- 16 hex digits
  caller_id TEXT NOT NULL,            -- the caller the key acts as: runs and limits count against `api:<caller_id>`
  label TEXT NOT NULL,
  agents TEXT,                        -- JSON array of agent ids; NULL = every agent
  salt TEXT NOT NULL,
  secret_hash TEXT NOT NULL,
  prefix TEXT NOT NULL,
  created_at TEXT NOT NULL,
  rotated_at TEXT,
  last_used_at TEXT,
  expires_at TEXT,
  revoked_at TEXT,
  requests_per_minute INTEGER,        -- NULL = no per-key rate limit
  tokens_per_day INTEGER              -- NULL = no per-key token budget
);
-- The admin list: newest first, keyset-paged on (created_at, key_id).
CREATE INDEX api_keys_by_created ON api_keys (created_at DESC, key_id DESC);

-- Requests per minute per key: one row per key, the current minute (ms since the epoch / 60000) and how many
-- requests it admitted. One atomic upsert per request decides admission, so concurrent requests never exceed the limit.
CREATE TABLE api_key_requests (
  key_id TEXT PRIMARY KEY,
  minute INTEGER NOT NULL,
  count INTEGER NOT NULL
);

-- Provider tokens per key per UTC day (`limits.tokensPerDay`), reserved before each model call in the same D1 batch
-- as the agent's and the caller's rows (src/runs/token-budget.ts); `reservation` names the last reservation made here.
CREATE TABLE api_key_token_usage (
  key_id TEXT NOT NULL,
  day TEXT NOT NULL,                  -- YYYY-MM-DD (UTC)
  tokens INTEGER NOT NULL DEFAULT 0,
  reservation TEXT,
  PRIMARY KEY (key_id, day)
);
