-- D-083: refused senders' rows in channel_senders are pruned 30 days after their last refusal, at most
-- SENDER_PRUNE_LIMIT per cron tick (src/channels/sender-store.ts, pruneRefusedSenders). The partial index lets each
-- pass read only the rows it deletes, oldest first, instead of scanning the whole table every minute; paired rows
-- (kept for good) are not in it.
CREATE INDEX channel_senders_refused ON channel_senders (last_refused_at) WHERE paired_at IS NULL;
