-- Hardening of the trail against a forger who holds the application role
-- (sandgate_app: INSERT and SELECT on the trail, signing keys of their
-- own, no legitimate node's private key).
--
-- 1. recorded_at is the database's clock. The column defaults to now()
--    (the inserting transaction's start) and a BEFORE INSERT trigger,
--    ENABLE ALWAYS on every partition, refuses any other value unless the
--    inserting role owns the trail (the owner can disable triggers anyway;
--    it restores dumps and moves rows between partitions). A row's hashed
--    body keeps the time its writer sealed it, which for an event delivered
--    late from a gateway's spool is earlier than recorded_at; event_time is
--    the producer's. Rows already stored keep their recorded_at, which
--    their bodies hold too, so existing chains verify as before.
--
-- 2. audit_keys registers each node's Ed25519 checkpoint key when the node
--    first uses it, so verify knows every legitimate key without being
--    handed each node's. The application role may only read it and call
--    audit_register_key, which registers a key for a node that has none,
--    and otherwise records a rotation that names the key it replaces and
--    carries that key's endorsement (a signature verify checks; the
--    database cannot). A rotation without a valid endorsement is reported
--    by verify. Rows are never changed or removed. Keys that signed
--    checkpoints before this migration are registered from those
--    checkpoints (source 'migration').
--
-- 3. Rows that landed in audit_events_default (their month had no
--    partition yet) are moved into month partitions by
--    audit_adopt_default, which audit_ensure_partitions calls first, so
--    retention archives and purges them like any other month.

-- +goose Up
ALTER TABLE audit_events ALTER COLUMN recorded_at SET DEFAULT now();

-- It names pg_catalog's objects itself instead of setting a search_path,
-- which would cost a configuration change per call.
-- +goose StatementBegin
CREATE FUNCTION audit_stamp_recorded_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.recorded_at IS DISTINCT FROM pg_catalog.now()
        AND NOT pg_catalog.pg_has_role(current_user,
            (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID), 'MEMBER') THEN
        RAISE EXCEPTION 'sandgate: recorded_at is the database''s clock (%), an insert may not choose it (%)',
            pg_catalog.now(), NEW.recorded_at USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- The WHEN clause keeps the common case cheap: a row stamped by the
-- default calls no function.
CREATE TRIGGER audit_events_recorded_at BEFORE INSERT ON audit_events
    FOR EACH ROW WHEN (NEW.recorded_at IS DISTINCT FROM now())
    EXECUTE FUNCTION audit_stamp_recorded_at();
ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_recorded_at;

-- audit_protect_partition gives a partition of audit_events what the
-- parent cannot hand down: no privileges for PUBLIC, a TRUNCATE trigger of
-- its own, and every trigger firing ALWAYS.
-- +goose StatementBegin
CREATE FUNCTION audit_protect_partition(part regclass) RETURNS void
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', part);
    IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = part AND tgname = 'audit_events_no_truncate') THEN
        EXECUTE format('CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON %s
            FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change()', part);
    END IF;
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER audit_events_no_truncate', part);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER audit_events_no_update', part);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER audit_events_recorded_at', part);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION audit_protect_partition(regclass) FROM PUBLIC;

-- +goose StatementBegin
DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'audit_events'::regclass LOOP
        PERFORM audit_protect_partition(part);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- audit_adopt_default moves every row of audit_events_default into the
-- month partition of its recorded_at, creating the partitions it needs,
-- and returns how many rows it moved. The default partition is detached,
-- replaced by an empty one, and dropped once its rows are in their months:
-- no row is updated or deleted, and hashes and bodies are untouched. It
-- holds the trail exclusively while it works, so writers wait; it only
-- works when the default partition has rows. It runs as the schema's
-- owner, so the application role can call it.
-- +goose StatementBegin
CREATE FUNCTION audit_adopt_default() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    month timestamp;
    lo    timestamptz;
    part  text;
    moved bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('sandgate.audit_ensure_partitions'));
    IF NOT EXISTS (SELECT FROM audit_events_default) THEN
        RETURN 0;
    END IF;
    LOCK TABLE audit_events IN ACCESS EXCLUSIVE MODE;
    ALTER TABLE audit_events DETACH PARTITION audit_events_default;
    ALTER TABLE audit_events_default RENAME TO audit_events_default_adopted;
    CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;
    PERFORM audit_protect_partition('audit_events_default'::regclass);
    FOR month IN SELECT DISTINCT date_trunc('month', recorded_at AT TIME ZONE 'UTC') FROM audit_events_default_adopted LOOP
        lo := month AT TIME ZONE 'UTC';
        part := audit_partition_name(lo);
        IF to_regclass(part) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF audit_events FOR VALUES FROM (%L) TO (%L)',
                part, lo, (month + interval '1 month') AT TIME ZONE 'UTC');
            PERFORM audit_protect_partition(part::regclass);
        END IF;
    END LOOP;
    -- As the owner, so the rows keep their recorded_at.
    INSERT INTO audit_events (event_id, chain_id, seq, recorded_at, event_time, type, outcome, correlation_id,
        run_id, decision_id, container_id, actor, team, node, policy_revision, exit_code, payload, body, prev_hash, hash)
    SELECT event_id, chain_id, seq, recorded_at, event_time, type, outcome, correlation_id,
        run_id, decision_id, container_id, actor, team, node, policy_revision, exit_code, payload, body, prev_hash, hash
    FROM audit_events_default_adopted ORDER BY chain_id, seq;
    GET DIAGNOSTICS moved = ROW_COUNT;
    DROP TABLE audit_events_default_adopted;
    RAISE LOG 'sandgate: % rows moved from audit_events_default into their month partitions', moved;
    RETURN moved;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION audit_adopt_default() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION audit_adopt_default() TO sandgate_app;

-- audit_ensure_partitions creates the month partitions (UTC months) that
-- cover "since" through "until" and do not exist yet, and returns how
-- many it created. Rows waiting in the default partition are first moved
-- into their months (audit_adopt_default), so no month is skipped for
-- them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION audit_ensure_partitions(since timestamptz, until timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    month   timestamp := date_trunc('month', since AT TIME ZONE 'UTC');
    lo      timestamptz;
    part    text;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('sandgate.audit_ensure_partitions'));
    PERFORM audit_adopt_default();
    WHILE month <= until AT TIME ZONE 'UTC' LOOP
        lo := month AT TIME ZONE 'UTC';
        part := audit_partition_name(lo);
        IF to_regclass(part) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF audit_events FOR VALUES FROM (%L) TO (%L)',
                part, lo, (month + interval '1 month') AT TIME ZONE 'UTC');
            PERFORM audit_protect_partition(part::regclass);
            created := created + 1;
        END IF;
        month := month + interval '1 month';
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

CREATE TABLE audit_keys (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node          text        NOT NULL,
    key_id        text        NOT NULL,
    public_key    bytea       NOT NULL CHECK (length(public_key) = 32),
    -- The database's clock when the key was registered (for 'migration'
    -- rows: its first checkpoint's time).
    first_used_at timestamptz NOT NULL DEFAULT now(),
    chain_id      text,
    -- The node's key this one replaces (a rotation), NULL for its first.
    replaces      text,
    -- Ed25519 signature by the replaced key over
    -- "sandgate-key-rotation-v1\n<node>\n<replaces>\n<hex public_key>".
    endorsement   bytea,
    source        text        NOT NULL CHECK (source IN ('writer', 'migration')),
    CONSTRAINT audit_keys_node_key UNIQUE (node, key_id),
    CONSTRAINT audit_keys_key_id CHECK (key_id = encode(substr(sha256(public_key), 1, 8), 'hex'))
);

COMMENT ON TABLE audit_keys IS
    'sandgate checkpoint keys by node, registered on first use (audit_register_key); append-only';

CREATE TRIGGER audit_keys_no_update BEFORE UPDATE OR DELETE ON audit_keys
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_keys_no_truncate BEFORE TRUNCATE ON audit_keys
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
ALTER TABLE audit_keys ENABLE ALWAYS TRIGGER audit_keys_no_update;
ALTER TABLE audit_keys ENABLE ALWAYS TRIGGER audit_keys_no_truncate;

-- Keys that signed checkpoints so far, each node's in the order it first
-- used them.
INSERT INTO audit_keys (node, key_id, public_key, first_used_at, chain_id, replaces, source)
SELECT node, key_id, public_key, first_used_at, chain_id,
    lag(key_id) OVER (PARTITION BY node ORDER BY first_used_at, key_id), 'migration'
FROM (
    SELECT DISTINCT ON (coalesce(c.node, cp.chain_id), cp.public_key)
        coalesce(c.node, cp.chain_id) AS node, encode(substr(sha256(cp.public_key), 1, 8), 'hex') AS key_id,
        cp.public_key, cp.created_at AS first_used_at, cp.chain_id
    FROM audit_checkpoints cp LEFT JOIN audit_chains c USING (chain_id)
    WHERE length(cp.public_key) = 32
    ORDER BY coalesce(c.node, cp.chain_id), cp.public_key, cp.created_at, cp.id
) k
ORDER BY first_used_at, key_id;

-- audit_register_key registers public_key for node on its first use and
-- says what it found: 'known' (registered before, for this node),
-- 'registered' (the node's first key) or 'rotated' (the node had another
-- key: the new row replaces the node's newest key, with endorsement, the
-- replaced key's signature, as given). recorded tells whether the trail
-- holds an audit.key_registered or audit.key_rotated event for it. It runs
-- as the table's owner: the application role registers keys only through
-- it, and can never change a registration.
-- +goose StatementBegin
CREATE FUNCTION audit_register_key(node text, public_key bytea, chain_id text, endorsement bytea)
RETURNS TABLE (key_id text, status text, recorded boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    cur text;
BEGIN
    IF node IS NULL OR public_key IS NULL OR length(public_key) <> 32 THEN
        RAISE EXCEPTION 'sandgate: audit_register_key needs a node and a 32-byte Ed25519 public key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    key_id := encode(substr(sha256(public_key), 1, 8), 'hex');
    PERFORM pg_advisory_xact_lock(hashtext('sandgate.audit_keys'), hashtext(node));
    IF EXISTS (SELECT FROM audit_keys a WHERE a.node = audit_register_key.node AND a.key_id = audit_register_key.key_id) THEN
        status := 'known';
    ELSE
        SELECT a.key_id INTO cur FROM audit_keys a WHERE a.node = audit_register_key.node ORDER BY a.id DESC LIMIT 1;
        INSERT INTO audit_keys (node, key_id, public_key, chain_id, replaces, endorsement, source)
        VALUES (audit_register_key.node, audit_register_key.key_id, audit_register_key.public_key,
            audit_register_key.chain_id, cur, CASE WHEN cur IS NULL THEN NULL ELSE audit_register_key.endorsement END, 'writer');
        status := CASE WHEN cur IS NULL THEN 'registered' ELSE 'rotated' END;
    END IF;
    recorded := EXISTS (SELECT FROM audit_events e
        WHERE e.type IN ('audit.key_registered', 'audit.key_rotated')
          AND e.payload->>'node' = audit_register_key.node AND e.payload->>'key_id' = audit_register_key.key_id);
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

REVOKE ALL ON audit_keys FROM PUBLIC;
GRANT SELECT ON audit_keys TO sandgate_app;
REVOKE ALL ON FUNCTION audit_register_key(text, bytea, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION audit_register_key(text, bytea, text, bytea) TO sandgate_app;

-- Rows waiting in the default partition go to their months now.
SELECT audit_adopt_default();

-- +goose Down
-- The trail is evidence: migrating down refuses rather than destroy it.
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION 'sandgate: the audit trail''s clock and key registry cannot be undone';
END
$$;
-- +goose StatementEnd
