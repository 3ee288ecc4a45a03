-- Issue 21 §1: a firing row shows how its run ended — the run's final status and its automation completion
-- (JSON: {"status":"recorded","completion_id","outcome","summary","recorded_at"} or {"status":"missing"}),
-- written by the SessionDO once the run has finished.
ALTER TABLE job_firings ADD COLUMN run_status TEXT;
ALTER TABLE job_firings ADD COLUMN completion TEXT;
