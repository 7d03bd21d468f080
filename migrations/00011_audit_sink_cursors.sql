-- Where each audit sink (a SIEM's syslog receiver or webhook) stands in
-- the trail: one row per sink and chain, the seq of the last event of that
-- chain the receiver acknowledged. A chain is gapless and each chain's
-- rows become visible in seq order (one writer commits them in order), so
-- "everything of the chain up to seq" is exact, whatever other chains and
-- nodes commit meanwhile. The row with chain_id '' marks that the sink's
-- start position was taken (start: newest puts the chains that existed
-- then at their heads; a chain that appears later starts at its first
-- event).
--
-- The delivering gateway holds pg_try_advisory_lock on the sink's name
-- and moves its rows forward only after the receiver acknowledged; the
-- rows are bookkeeping, not evidence, so the application role may update
-- them.

-- +goose Up
CREATE TABLE audit_sink_cursors (
    sink        text        NOT NULL,
    chain_id    text        NOT NULL,
    seq         bigint      NOT NULL CHECK (seq >= 0),
    -- The last delivered event's, for operators reading the table.
    event_id    uuid,
    recorded_at timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sink, chain_id)
);

COMMENT ON TABLE audit_sink_cursors IS
    'sandgate audit sinks: per sink and chain, the seq of the last event the receiver acknowledged';

REVOKE ALL ON audit_sink_cursors FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON audit_sink_cursors TO sandgate_app;

-- +goose Down
DROP TABLE audit_sink_cursors;
