-- How many events one delivery of a subscription may carry (1: one event
-- per request, the Standard Webhooks way; more: a JSON batch of up to
-- that many consecutive events).
ALTER TABLE webhooks ADD COLUMN batch BIGINT NOT NULL DEFAULT 1;
