-- Issue 25 §3 (D-079): what the dashboard's runs list shows of a run without opening its SessionDO.
--
-- Written by the run's index row (src/runs/index-d1.ts runIndexStatement), which the SessionDO's index outbox ships
-- in its existing D1 batch when the run pauses or ends (D-069): no D1 call is added. Rows written before this
-- migration keep NULL here (the dashboard shows "—").
ALTER TABLE runs ADD COLUMN message_preview TEXT;   -- the user message's first 80 characters, as the transcript stored it (redacted)
ALTER TABLE runs ADD COLUMN output_preview TEXT;    -- the answer's (the guarded output's) first 80 characters
ALTER TABLE runs ADD COLUMN duration_ms INTEGER;    -- started → finished; NULL while the run has not ended
ALTER TABLE runs ADD COLUMN rounds INTEGER;         -- tool rounds (model answers that asked for tools), as run.completed counts them
ALTER TABLE runs ADD COLUMN tool_calls INTEGER;     -- tool calls the gateway took on

-- The caller filter (?caller_id=) reads an index range like the agent and status filters (0003, 0012) do.
CREATE INDEX IF NOT EXISTS runs_by_caller ON runs (caller_id, created_at);
