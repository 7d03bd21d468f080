-- Many nodes on one database.
--
-- nodes: each `sandgate serve` registers here at start and heartbeats
-- while it serves: where peers reach it (advertise_url), the Docker daemon
-- it drives (docker_host, whether it answered), its load and its audit
-- signing key (the key registry, audit_keys, vouches for the key; the row
-- says which one the node signs with now). A node whose heartbeat lapsed
-- is taken over by exactly one survivor: a single UPDATE moves the row to
-- 'gone' with taken_over_by set, and in the same transaction moves the
-- dead node's unfinished runs and open sessions to the survivor.
--
-- run_slots: one row per admitted, unfinished run, so that team limits and
-- each node's load are counted across the cluster, under an advisory lock.
--
-- idempotency_keys: a key is claimed before its request is decided (the
-- run does not exist yet), so the reference to runs goes; the claim names
-- the run ID the request will have, and only the node that made the claim
-- records an admission for it.

-- +goose Up
CREATE TABLE nodes (
    name            text        PRIMARY KEY,
    advertise_url   text        NOT NULL DEFAULT '',
    docker_host     text        NOT NULL DEFAULT '',
    docker_healthy  boolean     NOT NULL DEFAULT false,
    docker_error    text        NOT NULL DEFAULT '',
    running         integer     NOT NULL DEFAULT 0,
    capacity        integer     NOT NULL DEFAULT 0,
    key_id          text        NOT NULL DEFAULT '',
    public_key      text        NOT NULL DEFAULT '',
    version         text        NOT NULL DEFAULT '',
    state           text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'gone')),
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    taken_over_by   text        NOT NULL DEFAULT '',
    taken_over_at   timestamptz,
    takeover        jsonb
);
CREATE INDEX nodes_active ON nodes (heartbeat_at) WHERE state = 'active';

CREATE TABLE run_slots (
    run_id     text        PRIMARY KEY,
    team       text        NOT NULL,
    node       text        NOT NULL,
    memory_mb  bigint      NOT NULL DEFAULT 0,
    cpus       double precision NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_slots_team ON run_slots (team);
CREATE INDEX run_slots_node ON run_slots (node);

ALTER TABLE idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_run_id_fkey;
-- The keyed digest of the request that claimed the key, so that a retry
-- on another node is compared with the request, not with its run.
ALTER TABLE idempotency_keys ADD COLUMN request_digest text NOT NULL DEFAULT '';

REVOKE ALL ON nodes, run_slots FROM PUBLIC;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        GRANT SELECT, INSERT, UPDATE ON nodes TO sandgate_app;
        GRANT SELECT, INSERT, UPDATE, DELETE ON run_slots TO sandgate_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DELETE FROM idempotency_keys k WHERE NOT EXISTS (SELECT FROM runs r WHERE r.id = k.run_id);
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_run_id_fkey FOREIGN KEY (run_id) REFERENCES runs (id);
ALTER TABLE idempotency_keys DROP COLUMN request_digest;
DROP TABLE run_slots;
DROP TABLE nodes;
