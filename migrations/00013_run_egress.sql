-- What a finished egress run did through the egress proxy
-- (sandgate.EgressSummary): connections allowed and denied, bytes each
-- way, its busiest destinations. NULL for runs of other networks and for
-- rows written before.

-- +goose Up
ALTER TABLE runs ADD COLUMN egress jsonb;

-- +goose Down
ALTER TABLE runs DROP COLUMN egress;
