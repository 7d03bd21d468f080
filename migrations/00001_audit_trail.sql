-- The audit trail: append-only events, hash-chained per writer chain, and
-- the Ed25519-signed checkpoints over each chain's head.

-- +goose Up
CREATE TABLE audit_chains (
    chain_id   text        PRIMARY KEY,
    node       text        NOT NULL,
    key_id     text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit_events (
    event_id        uuid        NOT NULL UNIQUE,
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
    -- body is the exact canonical JSON that was hashed; the columns above
    -- are a queryable copy of it and verify checks that they agree.
    body            bytea       NOT NULL,
    prev_hash       bytea       NOT NULL CHECK (length(prev_hash) = 32),
    hash            bytea       NOT NULL CHECK (length(hash) = 32),
    CONSTRAINT audit_events_pkey PRIMARY KEY (chain_id, seq)
);

COMMENT ON TABLE audit_events IS
    'sandgate audit trail: append-only; hash = SHA-256(prev_hash || uint16be(len(chain_id)) || chain_id || uint64be(seq) || body)';

-- Auditors' queries: each filter by time, in the trail's keyset order.
CREATE INDEX audit_events_time ON audit_events (recorded_at, chain_id, seq);
CREATE INDEX audit_events_correlation ON audit_events (correlation_id, recorded_at) WHERE correlation_id IS NOT NULL;
CREATE INDEX audit_events_run ON audit_events (run_id, recorded_at) WHERE run_id IS NOT NULL;
CREATE INDEX audit_events_decision ON audit_events (decision_id, recorded_at) WHERE decision_id IS NOT NULL;
CREATE INDEX audit_events_actor ON audit_events (actor, recorded_at) WHERE actor IS NOT NULL;
CREATE INDEX audit_events_team ON audit_events (team, recorded_at) WHERE team IS NOT NULL;
CREATE INDEX audit_events_type ON audit_events (type, recorded_at);
CREATE INDEX audit_events_outcome ON audit_events (outcome, recorded_at) WHERE outcome IS NOT NULL;

CREATE TABLE audit_checkpoints (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id       text        NOT NULL,
    seq            bigint      NOT NULL CHECK (seq >= 0),
    head_hash      bytea       NOT NULL CHECK (length(head_hash) = 32),
    created_at     timestamptz NOT NULL,
    final          boolean     NOT NULL DEFAULT false,
    prev_signature bytea,
    signature      bytea       NOT NULL,
    key_id         text        NOT NULL,
    public_key     bytea       NOT NULL
);

CREATE INDEX audit_checkpoints_chain ON audit_checkpoints (chain_id, seq, id);

-- Append-only, even for the tables' owner: ENABLE ALWAYS triggers fire
-- whatever session_replication_role says. Only a superuser who disables
-- them can change a row, and verify catches that.
-- +goose StatementBegin
CREATE FUNCTION audit_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sandgate: % on % is refused: the audit trail is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_events_no_update BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_update;
ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_truncate;

CREATE TRIGGER audit_checkpoints_no_update BEFORE UPDATE OR DELETE ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_update;
ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_truncate;

CREATE TRIGGER audit_chains_no_update BEFORE UPDATE OR DELETE ON audit_chains
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_chains_no_truncate BEFORE TRUNCATE ON audit_chains
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
ALTER TABLE audit_chains ENABLE ALWAYS TRIGGER audit_chains_no_update;
ALTER TABLE audit_chains ENABLE ALWAYS TRIGGER audit_chains_no_truncate;

-- +goose Down
-- The trail is evidence: migrating down refuses rather than destroy it.
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION 'sandgate: the audit trail migration cannot be undone';
END
$$;
-- +goose StatementEnd
