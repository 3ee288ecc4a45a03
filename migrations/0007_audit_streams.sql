-- Which audit streams (SessionDOs) wrote segments for an agent on a day, so that verification can notice
-- a stream whose every segment of that day was removed. Written when a stream's first segment of a day lands.
CREATE TABLE audit_streams (
  agent_id TEXT NOT NULL,
  day TEXT NOT NULL,               -- YYYY-MM-DD (UTC)
  stream TEXT NOT NULL,            -- the SessionDO id
  PRIMARY KEY (agent_id, day, stream)
);
