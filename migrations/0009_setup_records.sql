-- S5 setup records and environment requests (DESIGN "Where tools run"; src/tools/builtin/s5.ts).
--
-- setup_records: what a setup session saved about an agent's environment, one row per
-- (agent, kind), replaced by each later save of that kind. kind `service_commands` holds
-- {"commands": [{name, command, cwd?, workspacePath?}]} from `save_service_commands`;
-- kind `env_files` holds {"files": [{path, workspacePath?, format: "dotenv", mode: "secret",
-- keys: [{key, required?, description?}]}]} from `save_env_files` — a spec of which keys
-- go into which file, never a secret value (S5 §6.6).
CREATE TABLE setup_records (
  agent_id TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('service_commands', 'env_files')),
  payload TEXT NOT NULL,              -- JSON, as above
  session_id TEXT NOT NULL,           -- the setup session that saved it
  tool_call_id TEXT NOT NULL,         -- the call that saved it
  updated_at TEXT NOT NULL,           -- ISO 8601 UTC
  PRIMARY KEY (agent_id, kind)
);

-- env_requests: one row per `request_env_variables` call — the keys an agent asked a person
-- to provide ({key, type?, required?, description?, suggestions?}, never values). The tool
-- records the request and returns at once; fulfilling it is the secrets subsystem's job.
-- A retried call (same session and tool_call_id) finds its first row instead of adding one.
CREATE TABLE env_requests (
  id TEXT PRIMARY KEY,                -- envreq_ + 24 hex digits
  agent_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  run_id TEXT,                        -- the run the call belonged to, if any
  tool_call_id TEXT NOT NULL,
  keys TEXT NOT NULL,                 -- JSON array of key specs, as above
  status TEXT NOT NULL DEFAULT 'open',-- 'open' when recorded
  created_at TEXT NOT NULL            -- ISO 8601 UTC
);
CREATE UNIQUE INDEX env_requests_by_call ON env_requests (session_id, tool_call_id);
-- Open requests of an agent, oldest first.
CREATE INDEX env_requests_by_agent ON env_requests (agent_id, status, created_at);
