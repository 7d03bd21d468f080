-- Fencing: a node taken over records nothing more on its chains.
--
-- A node cut off from the database (or its heartbeat made late) while its
-- gateway and containers run on is taken over by a survivor, which adopts
-- its containers and records their ends. The node itself, when it reaches
-- the database again, would record the same ends from its own spool. So
-- the takeover fences the dead node's chains, in its transaction
-- (audit_fence_node): each chain's head at that moment is written to
-- audit_fences, and the database refuses any event of a fenced chain past
-- it, and any checkpoint of it but a final one over that head (the
-- survivor's closing checkpoint). Refused with SQLSTATE SGFNC, which the
-- node's writer knows: it keeps the events in its spool and reports
-- itself fenced.
--
-- A fence and an insert into its chain are ordered by an advisory lock
-- per chain (the one closing a chain takes already): an insert holds it
-- shared until it commits, the fence takes it exclusively before it reads
-- the head, so the head it fences at includes every insert that got in
-- first, and every later one finds the fence.

-- +goose Up
CREATE TABLE audit_fences (
    chain_id  text        PRIMARY KEY REFERENCES audit_chains (chain_id),
    seq       bigint      NOT NULL,
    fenced_by text        NOT NULL,
    fenced_at timestamptz NOT NULL DEFAULT now(),
    reason    text        NOT NULL DEFAULT ''
);
CREATE TRIGGER audit_fences_no_update BEFORE UPDATE OR DELETE ON audit_fences
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_fences_no_truncate BEFORE TRUNCATE ON audit_fences
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
ALTER TABLE audit_fences ENABLE ALWAYS TRIGGER audit_fences_no_update;
ALTER TABLE audit_fences ENABLE ALWAYS TRIGGER audit_fences_no_truncate;

-- +goose StatementBegin
CREATE FUNCTION audit_chain_lock(chain text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtextextended('sandgate-close-chain:' || chain, 0) $$;
-- +goose StatementEnd

-- audit_fence_node fences every chain of node dead not fenced yet, at its
-- head, for survivor; it returns how many it fenced.
-- +goose StatementBegin
CREATE FUNCTION audit_fence_node(dead text, survivor text, why text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    n integer := 0;
BEGIN
    FOR c IN SELECT chain_id FROM audit_chains
             WHERE (node = dead OR node = dead || '-decisions')
               AND NOT EXISTS (SELECT FROM audit_fences f WHERE f.chain_id = audit_chains.chain_id)
             ORDER BY chain_id
    LOOP
        PERFORM pg_advisory_xact_lock(audit_chain_lock(c.chain_id));
        INSERT INTO audit_fences (chain_id, seq, fenced_by, reason)
        VALUES (c.chain_id, coalesce((SELECT seq FROM audit_heads WHERE chain_id = c.chain_id), 0), survivor, why)
        ON CONFLICT (chain_id) DO NOTHING;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION audit_refuse_fenced_events() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(audit_chain_lock(chain_id))
    FROM (SELECT DISTINCT chain_id FROM new_rows ORDER BY chain_id) d;
    SELECT n.chain_id, n.seq, f.seq AS fence, f.fenced_by INTO bad
    FROM new_rows n JOIN audit_fences f USING (chain_id)
    WHERE n.seq > f.seq
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SGFNC',
            MESSAGE = format('chain %s is fenced at seq %s by node %s (its node was taken over); seq %s refused',
                             bad.chain_id, bad.fence, bad.fenced_by, bad.seq);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_events_fenced AFTER INSERT ON audit_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_fenced_events();
ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_fenced;

-- +goose StatementBegin
CREATE FUNCTION audit_refuse_fenced_checkpoint() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    f audit_fences;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(audit_chain_lock(NEW.chain_id));
    SELECT * INTO f FROM audit_fences WHERE chain_id = NEW.chain_id;
    IF FOUND AND NOT (NEW.final AND NEW.seq = f.seq) THEN
        RAISE EXCEPTION USING ERRCODE = 'SGFNC',
            MESSAGE = format('chain %s is fenced at seq %s by node %s (its node was taken over); a checkpoint at seq %s refused',
                             NEW.chain_id, f.seq, f.fenced_by, NEW.seq);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_checkpoints_fenced BEFORE INSERT ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_fenced_checkpoint();
ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_fenced;

-- What a fenced node holds: it reports the count on its row, which
-- GET /v1/nodes shows from any node.
ALTER TABLE nodes ADD COLUMN held_events bigint NOT NULL DEFAULT 0;

REVOKE ALL ON audit_fences FROM PUBLIC;
REVOKE ALL ON FUNCTION audit_fence_node(text, text, text) FROM PUBLIC;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        GRANT SELECT, INSERT ON audit_fences TO sandgate_app;
        GRANT EXECUTE ON FUNCTION audit_fence_node(text, text, text) TO sandgate_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER audit_checkpoints_fenced ON audit_checkpoints;
DROP FUNCTION audit_refuse_fenced_checkpoint();
DROP TRIGGER audit_events_fenced ON audit_events;
DROP FUNCTION audit_refuse_fenced_events();
DROP FUNCTION audit_fence_node(text, text, text);
DROP FUNCTION audit_chain_lock(text);
DROP TABLE audit_fences;
ALTER TABLE nodes DROP COLUMN held_events;
