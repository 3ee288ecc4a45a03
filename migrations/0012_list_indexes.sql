-- Keyset paging (docs/api.md "Lists"): each list's sort key gets an index, so a page is an index range scan
-- however long the list grows. Sessions page by (created_at, session_key); runs and approvals by
-- (created_at, id) when no filter narrows them.
CREATE INDEX sessions_by_created ON sessions (created_at, session_key);
CREATE INDEX runs_by_created ON runs (created_at, run_id);
CREATE INDEX approvals_by_created ON approvals (created_at, approval_id);
