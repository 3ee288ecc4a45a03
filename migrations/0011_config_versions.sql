-- Admin-posted configuration (S3 §5 "POST /api/admin/config -> persist validated config"; DESIGN §4 "config
-- versions"). Each accepted POST is a new immutable version; the newest is in force on every isolate within
-- seconds (isolates probe `admin_generation` at most every few seconds). Versions hold no secrets: the same
-- validation as the bundled file refuses credential-shaped values.
CREATE TABLE config_versions (
  version INTEGER PRIMARY KEY,    -- 1, 2, 3…; 0 means "the bundled config/gateway.json5"
  body TEXT NOT NULL,             -- the posted config as JSON, exactly as validated
  sha256 TEXT NOT NULL,           -- of `body`
  bundled_sha256 TEXT NOT NULL,   -- the bundled file's hash when this version was posted: a later deploy supersedes it
  actor TEXT NOT NULL,            -- who posted it ("admin")
  created_at TEXT NOT NULL
);

-- Change counters the isolates poll to learn, in one cheap query, whether the config or the stored secrets changed.
CREATE TABLE admin_generation (
  name TEXT PRIMARY KEY,          -- 'secrets'
  value INTEGER NOT NULL
);
