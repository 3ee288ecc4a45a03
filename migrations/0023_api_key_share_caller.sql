-- Issue 33 (D-087): a key record whose caller_id is also a caller of GATEWAY_API_TOKENS shares that caller's runs,
-- conversations, budgets and limits. That is allowed only when the admin says so (`share_caller: true`, the move
-- from GATEWAY_API_TOKENS to key records); without it the key is refused at creation and patching (409) and at
-- every request while an env token names its caller (401, logged as auth.key_refused caller_in_env). Existing keys
-- start at 0: a key made before this check that shares an env caller must be shared on purpose (PATCH) to work.
ALTER TABLE api_keys ADD COLUMN share_caller INTEGER NOT NULL DEFAULT 0;
