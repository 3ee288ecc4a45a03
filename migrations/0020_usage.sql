-- Issue 25 §2 (D-078): usage and cost per run, rolled up per (UTC day, agent, caller, model, job), and budget alerts.
--
-- Cost unit: pico-USD (10^-12 USD) as INTEGER. A price of p USD per million tokens is p × 10^6 pico-USD per token, an
-- integer for prices of at most 6 decimals (the config schema enforces it), so costs add up exactly. Sums are read
-- back as TEXT (CAST(SUM(..) AS TEXT)) and formatted as a decimal USD string: no float ever holds a cost.

-- Each run's usage so far rides its run index row (src/runs/index-d1.ts), which the run's SessionDO ships in the
-- run-stop D1 batch (D-069) — no statement of its own. The row only moves forward (newer updated_at), so a batch sent
-- twice changes nothing the second time; the triggers below turn each real change of `requests` into the rollups'
-- and alert totals' deltas, in the same transaction, so every model call is counted exactly once. The run counts on
-- the UTC day it was created (substr(created_at, 1, 10)); `job_id` is '' for runs no job started; `model` is
-- `provider:model`; `caller` is the caller key (src/runs/caller.ts: api:<id>, job:<id>, <channel>:<account>:<sender>).
ALTER TABLE runs ADD COLUMN caller TEXT;
ALTER TABLE runs ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN requests INTEGER NOT NULL DEFAULT 0;             -- model calls that answered
ALTER TABLE runs ADD COLUMN unreported_requests INTEGER NOT NULL DEFAULT 0;  -- of which the provider reported no usage
ALTER TABLE runs ADD COLUMN uncosted_requests INTEGER NOT NULL DEFAULT 0;    -- of which no cost is known
ALTER TABLE runs ADD COLUMN prompt_tokens INTEGER NOT NULL DEFAULT 0;        -- provider-reported, cached included
ALTER TABLE runs ADD COLUMN completion_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;        -- prompt_tokens_details.cached_tokens
ALTER TABLE runs ADD COLUMN cost_pico INTEGER NOT NULL DEFAULT 0;            -- of the costed requests

-- Totals per (UTC day, agent, caller, model, job): what GET /api/admin/usage reads (never the runs).
CREATE TABLE usage_rollups (
  day TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  caller TEXT NOT NULL,
  model TEXT NOT NULL,
  job_id TEXT NOT NULL,
  requests INTEGER NOT NULL DEFAULT 0,
  runs INTEGER NOT NULL DEFAULT 0,
  unreported_requests INTEGER NOT NULL DEFAULT 0,
  uncosted_requests INTEGER NOT NULL DEFAULT 0,
  prompt_tokens INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0,
  cached_tokens INTEGER NOT NULL DEFAULT 0,
  cost_pico INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (day, agent_id, caller, model, job_id)
);

-- Totals per alert scope and period (`usage.alerts`): scope 'agent' or 'caller', period 'YYYY-MM-DD' or 'YYYY-MM'.
-- One row read per alert check, in the same batch that moved it.
CREATE TABLE usage_totals (
  scope TEXT NOT NULL CHECK (scope IN ('agent', 'caller')),
  scope_id TEXT NOT NULL,
  period TEXT NOT NULL,
  requests INTEGER NOT NULL DEFAULT 0,
  tokens INTEGER NOT NULL DEFAULT 0,      -- prompt + completion
  cost_pico INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (scope, scope_id, period)
);

-- An alert fired: at most one row per (alert, period), claimed by the first run whose batch found the total over the
-- threshold. `claimant` (that run's id) lets the same run's batch, sent again, read its claim back; any other gets none.
CREATE TABLE usage_alerts (
  alert_key TEXT NOT NULL,
  period TEXT NOT NULL,
  claimant TEXT NOT NULL,
  fired_at TEXT NOT NULL,
  tokens INTEGER NOT NULL,
  cost_pico INTEGER NOT NULL,
  PRIMARY KEY (alert_key, period)
);

CREATE TRIGGER runs_usage_insert AFTER INSERT ON runs WHEN NEW.requests > 0 BEGIN
  INSERT INTO usage_rollups (day, agent_id, caller, model, job_id, requests, runs, unreported_requests, uncosted_requests,
                             prompt_tokens, completion_tokens, cached_tokens, cost_pico)
  VALUES (substr(NEW.created_at, 1, 10), NEW.agent_id, COALESCE(NEW.caller, ''), NEW.model, NEW.job_id, NEW.requests, 1,
          NEW.unreported_requests, NEW.uncosted_requests, NEW.prompt_tokens, NEW.completion_tokens, NEW.cached_tokens, NEW.cost_pico)
  ON CONFLICT (day, agent_id, caller, model, job_id) DO UPDATE SET
    requests = requests + excluded.requests, runs = runs + 1,
    unreported_requests = unreported_requests + excluded.unreported_requests,
    uncosted_requests = uncosted_requests + excluded.uncosted_requests,
    prompt_tokens = prompt_tokens + excluded.prompt_tokens, completion_tokens = completion_tokens + excluded.completion_tokens,
    cached_tokens = cached_tokens + excluded.cached_tokens, cost_pico = cost_pico + excluded.cost_pico;
  INSERT INTO usage_totals (scope, scope_id, period, requests, tokens, cost_pico)
  VALUES ('agent', NEW.agent_id, substr(NEW.created_at, 1, 10), NEW.requests, NEW.prompt_tokens + NEW.completion_tokens, NEW.cost_pico),
         ('agent', NEW.agent_id, substr(NEW.created_at, 1, 7), NEW.requests, NEW.prompt_tokens + NEW.completion_tokens, NEW.cost_pico),
         ('caller', COALESCE(NEW.caller, ''), substr(NEW.created_at, 1, 10), NEW.requests, NEW.prompt_tokens + NEW.completion_tokens, NEW.cost_pico),
         ('caller', COALESCE(NEW.caller, ''), substr(NEW.created_at, 1, 7), NEW.requests, NEW.prompt_tokens + NEW.completion_tokens, NEW.cost_pico)
  ON CONFLICT (scope, scope_id, period) DO UPDATE SET
    requests = requests + excluded.requests, tokens = tokens + excluded.tokens, cost_pico = cost_pico + excluded.cost_pico;
END;

CREATE TRIGGER runs_usage_update AFTER UPDATE OF requests ON runs WHEN NEW.requests > OLD.requests BEGIN
  INSERT INTO usage_rollups (day, agent_id, caller, model, job_id, requests, runs, unreported_requests, uncosted_requests,
                             prompt_tokens, completion_tokens, cached_tokens, cost_pico)
  VALUES (substr(NEW.created_at, 1, 10), NEW.agent_id, COALESCE(NEW.caller, ''), NEW.model, NEW.job_id,
          NEW.requests - OLD.requests, OLD.requests = 0,
          NEW.unreported_requests - OLD.unreported_requests, NEW.uncosted_requests - OLD.uncosted_requests,
          NEW.prompt_tokens - OLD.prompt_tokens, NEW.completion_tokens - OLD.completion_tokens,
          NEW.cached_tokens - OLD.cached_tokens, NEW.cost_pico - OLD.cost_pico)
  ON CONFLICT (day, agent_id, caller, model, job_id) DO UPDATE SET
    requests = requests + excluded.requests, runs = runs + excluded.runs,
    unreported_requests = unreported_requests + excluded.unreported_requests,
    uncosted_requests = uncosted_requests + excluded.uncosted_requests,
    prompt_tokens = prompt_tokens + excluded.prompt_tokens, completion_tokens = completion_tokens + excluded.completion_tokens,
    cached_tokens = cached_tokens + excluded.cached_tokens, cost_pico = cost_pico + excluded.cost_pico;
  INSERT INTO usage_totals (scope, scope_id, period, requests, tokens, cost_pico)
  VALUES ('agent', NEW.agent_id, substr(NEW.created_at, 1, 10), NEW.requests - OLD.requests,
          NEW.prompt_tokens + NEW.completion_tokens - OLD.prompt_tokens - OLD.completion_tokens, NEW.cost_pico - OLD.cost_pico),
         ('agent', NEW.agent_id, substr(NEW.created_at, 1, 7), NEW.requests - OLD.requests,
          NEW.prompt_tokens + NEW.completion_tokens - OLD.prompt_tokens - OLD.completion_tokens, NEW.cost_pico - OLD.cost_pico),
         ('caller', COALESCE(NEW.caller, ''), substr(NEW.created_at, 1, 10), NEW.requests - OLD.requests,
          NEW.prompt_tokens + NEW.completion_tokens - OLD.prompt_tokens - OLD.completion_tokens, NEW.cost_pico - OLD.cost_pico),
         ('caller', COALESCE(NEW.caller, ''), substr(NEW.created_at, 1, 7), NEW.requests - OLD.requests,
          NEW.prompt_tokens + NEW.completion_tokens - OLD.prompt_tokens - OLD.completion_tokens, NEW.cost_pico - OLD.cost_pico)
  ON CONFLICT (scope, scope_id, period) DO UPDATE SET
    requests = requests + excluded.requests, tokens = tokens + excluded.tokens, cost_pico = cost_pico + excluded.cost_pico;
END;
