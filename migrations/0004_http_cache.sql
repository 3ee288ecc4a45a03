-- http.get response cache (S4 §4: "uses SQLite cache with TTL; returns cached response if fresh").
-- One row per fetched URL: the normalised URL of the request that answered 200 (a redirect's final hop;
-- redirects themselves are never cached). Only 200 responses are stored, bodies already capped and decoded.
--
-- The policy check ALWAYS runs before this table is read: http.get checks the URL (SSRF rules) and the
-- session's capabilities for every hop first, and only then looks a hop up here — so a cached response
-- is never served to a session whose capability was revoked, or for a URL the policy now refuses.
-- Rows are shared by all agents (public pages fetched without credentials); expired rows are deleted
-- when new ones are written.
CREATE TABLE http_cache (
  url TEXT PRIMARY KEY,
  status INTEGER NOT NULL,
  content_type TEXT,
  body TEXT NOT NULL,
  truncated INTEGER NOT NULL,      -- 1 when the body was cut at the size cap
  fetched_at INTEGER NOT NULL,     -- ms since the epoch
  expires_at INTEGER NOT NULL      -- ms since the epoch; a row is fresh while now < expires_at
);
CREATE INDEX http_cache_by_expiry ON http_cache (expires_at);
