-- audit_events becomes a table partitioned by month of recorded_at, so that
-- retention can drop whole months (sandgate audit purge) once they are
-- archived, instead of deleting rows, which the triggers refuse.
--
-- Partitions are named audit_events_YYYY_MM. audit_ensure_partitions
-- creates the months ahead; the writers call it at start and daily, so a
-- month's partition exists before its first event. audit_events_default
-- takes any row no month partition covers, so an insert never fails for
-- want of one; purge never drops it.
--
-- Existing rows are copied into the partitioned table (one pass; allow for
-- it on a large trail). The copy keeps every column, so hashes and
-- checkpoints are untouched.
--
-- Uniqueness on a partitioned table must include the partition key:
-- (chain_id, seq, recorded_at) and (event_id, recorded_at). A redelivered
-- event is the same sealed record with the same recorded_at, so delivery
-- stays idempotent. That (chain_id, seq) is unique the database no longer
-- sees by itself, so audit_heads holds each chain's newest (seq, hash) and
-- every commit moves it forward only from the head it sealed on: a second
-- writer on the same chain is refused instead of forking it. Verify still
-- reports any duplicate seq.

-- +goose Up
CREATE TABLE audit_events_partitioned (
    event_id        uuid        NOT NULL,
    chain_id        text        NOT NULL,
    seq             bigint      NOT NULL CHECK (seq > 0),
    recorded_at     timestamptz NOT NULL,
    event_time      timestamptz NOT NULL,
    type            text        NOT NULL,
    outcome         text,
    correlation_id  text,
    run_id          text,
    decision_id     text,
    container_id    text,
    actor           text,
    team            text,
    node            text,
    policy_revision text,
    exit_code       integer,
    payload         jsonb,
    body            bytea       NOT NULL,
    prev_hash       bytea       NOT NULL CHECK (length(prev_hash) = 32),
    hash            bytea       NOT NULL CHECK (length(hash) = 32)
) PARTITION BY RANGE (recorded_at);

CREATE TABLE audit_events_default PARTITION OF audit_events_partitioned DEFAULT;

-- The partition that holds a month: its name and bounds.
-- +goose StatementBegin
CREATE FUNCTION audit_partition_name(month timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'audit_events_' || to_char(month AT TIME ZONE 'UTC', 'YYYY_MM')
$$;
-- +goose StatementEnd

-- audit_ensure_partitions creates the month partitions (UTC months) that
-- cover "since" through "until" and do not exist yet, each with the
-- append-only triggers, and returns how many it created. A month whose rows
-- already sit in the default partition is skipped with a warning (they stay
-- there, verified like any other row). It runs as the schema's owner, so
-- the application role can call it without owning the table.
-- +goose StatementBegin
CREATE FUNCTION audit_ensure_partitions(since timestamptz, until timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    parent  regclass := to_regclass('audit_events');
    month   timestamp := date_trunc('month', since AT TIME ZONE 'UTC');
    lo      timestamptz;
    hi      timestamptz;
    part    text;
    created integer := 0;
BEGIN
    IF parent IS NULL OR NOT EXISTS (SELECT FROM pg_partitioned_table WHERE partrelid = parent) THEN
        -- During migration 4, before the partitioned table takes its name.
        parent := 'audit_events_partitioned'::regclass;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('sandgate.audit_ensure_partitions'));
    WHILE month <= until AT TIME ZONE 'UTC' LOOP
        lo := month AT TIME ZONE 'UTC';
        hi := (month + interval '1 month') AT TIME ZONE 'UTC';
        part := audit_partition_name(lo);
        month := month + interval '1 month';
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        IF EXISTS (SELECT FROM audit_events_default WHERE recorded_at >= lo AND recorded_at < hi) THEN
            RAISE WARNING 'sandgate: % not created: the default partition holds rows of that month', part;
            CONTINUE;
        END IF;
        EXECUTE format('CREATE TABLE %I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)', part, parent, lo, hi);
        EXECUTE format('REVOKE ALL ON %I FROM PUBLIC', part);
        -- Row triggers are cloned from the parent; TRUNCATE triggers are
        -- not, and a clone's firing mode is set here, not inherited.
        EXECUTE format('CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON %I
            FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change()', part);
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER audit_events_no_truncate', part);
        IF EXISTS (SELECT FROM pg_trigger WHERE tgrelid = part::regclass AND tgname = 'audit_events_no_update') THEN
            EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER audit_events_no_update', part);
        END IF;
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

REVOKE ALL ON FUNCTION audit_ensure_partitions(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION audit_ensure_partitions(timestamptz, timestamptz) TO sandgate_app;

-- Months for every existing row, and three ahead.
SELECT audit_ensure_partitions(coalesce(min(recorded_at), now()), now() + interval '3 months') FROM audit_events;

INSERT INTO audit_events_partitioned SELECT
    event_id, chain_id, seq, recorded_at, event_time, type, outcome, correlation_id, run_id, decision_id,
    container_id, actor, team, node, policy_revision, exit_code, payload, body, prev_hash, hash
FROM audit_events ORDER BY chain_id, seq;

-- DROP is not blocked by the row triggers; the rows live on in the copy.
DROP TABLE audit_events;
ALTER TABLE audit_events_partitioned RENAME TO audit_events;

ALTER TABLE audit_events ADD CONSTRAINT audit_events_pkey PRIMARY KEY (chain_id, seq, recorded_at);
ALTER TABLE audit_events ADD CONSTRAINT audit_events_event_id_key UNIQUE (event_id, recorded_at);

COMMENT ON TABLE audit_events IS
    'sandgate audit trail: append-only, partitioned by month of recorded_at; hash = SHA-256(prev_hash || uint16be(len(chain_id)) || chain_id || uint64be(seq) || body)';

-- Auditors' queries: each filter by time, in the trail's keyset order.
CREATE INDEX audit_events_time ON audit_events (recorded_at, chain_id, seq);
CREATE INDEX audit_events_correlation ON audit_events (correlation_id, recorded_at) WHERE correlation_id IS NOT NULL;
CREATE INDEX audit_events_run ON audit_events (run_id, recorded_at) WHERE run_id IS NOT NULL;
CREATE INDEX audit_events_decision ON audit_events (decision_id, recorded_at) WHERE decision_id IS NOT NULL;
CREATE INDEX audit_events_actor ON audit_events (actor, recorded_at) WHERE actor IS NOT NULL;
CREATE INDEX audit_events_team ON audit_events (team, recorded_at) WHERE team IS NOT NULL;
CREATE INDEX audit_events_type ON audit_events (type, recorded_at);
CREATE INDEX audit_events_outcome ON audit_events (outcome, recorded_at) WHERE outcome IS NOT NULL;

CREATE TRIGGER audit_events_no_update BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_update;
ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_truncate;

-- The partitions that exist now get their triggers' firing mode and a
-- TRUNCATE trigger of their own (audit_ensure_partitions does this for
-- later ones).
-- +goose StatementBegin
DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'audit_events'::regclass LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER audit_events_no_update', part);
        IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = part AND tgname = 'audit_events_no_truncate') THEN
            EXECUTE format('CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON %s
                FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change()', part);
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER audit_events_no_truncate', part);
        EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', part);
    END LOOP;
END
$$;
-- +goose StatementEnd

REVOKE ALL ON audit_events FROM PUBLIC;
GRANT SELECT, INSERT ON audit_events TO sandgate_app;

-- Each chain's head, moved in the same transaction as its rows. It is a
-- guard, not evidence: the rows and checkpoints are.
CREATE TABLE audit_heads (
    chain_id text   PRIMARY KEY,
    seq      bigint NOT NULL CHECK (seq > 0),
    hash     bytea  NOT NULL CHECK (length(hash) = 32)
);
INSERT INTO audit_heads (chain_id, seq, hash)
SELECT DISTINCT ON (chain_id) chain_id, seq, hash FROM audit_events ORDER BY chain_id, seq DESC;
REVOKE ALL ON audit_heads FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON audit_heads TO sandgate_app;

-- +goose Down
-- The trail is evidence: migrating down refuses rather than destroy it.
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION 'sandgate: partitioning the audit trail cannot be undone';
END
$$;
-- +goose StatementEnd
