-- Session index: one row per session key (conversation), for listing and filters.
CREATE TABLE sessions (
  session_key TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  channel TEXT NOT NULL,          -- "main" for agent:{id}:main
  account_id TEXT NOT NULL,       -- room id for HTTP chat; "" for main
  scope TEXT NOT NULL,            -- dm | group | run | job | main
  peer_id TEXT NOT NULL,          -- user id for HTTP chat; "" for main
  session_id TEXT NOT NULL,       -- the current generation
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX sessions_agent ON sessions (agent_id, updated_at);

-- Every generation (session_id) ever started, so a session_id finds its session key without a scan.
CREATE TABLE session_generations (
  session_id TEXT PRIMARY KEY,
  session_key TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  started_at TEXT NOT NULL
);
