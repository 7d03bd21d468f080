-- Runs: the state the API serves, and the queue a multi-node deployment
-- claims work from (FOR UPDATE SKIP LOCKED on state, node and claimed_at).

-- +goose Up
CREATE TABLE runs (
    id              text        PRIMARY KEY,
    correlation_id  text        NOT NULL DEFAULT '',
    decision_id     text        NOT NULL DEFAULT '',
    policy_revision text        NOT NULL DEFAULT '',
    principal       text        NOT NULL,
    team            text        NOT NULL DEFAULT '',
    node            text        NOT NULL DEFAULT '',
    state           text        NOT NULL CHECK (state IN ('pending', 'creating', 'running', 'finished')),
    outcome         text        NOT NULL DEFAULT '',
    exit_code       integer,
    oom_killed      boolean     NOT NULL DEFAULT false,
    error           jsonb,
    container_id    text        NOT NULL DEFAULT '',
    session_id      text        NOT NULL DEFAULT '',
    task_id         text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    started_at      timestamptz,
    finished_at     timestamptz,
    claimed_at      timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    duration_ms     bigint      NOT NULL DEFAULT 0,
    stdout          jsonb       NOT NULL DEFAULT '{}',
    stderr          jsonb       NOT NULL DEFAULT '{}',
    spec            jsonb       NOT NULL,
    warnings        jsonb       NOT NULL DEFAULT '[]',
    idempotency_key text
);

-- Listing is newest first with keyset paging on (created_at, id).
CREATE INDEX runs_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_team ON runs (team, created_at DESC, id DESC);
CREATE INDEX runs_state ON runs (state, created_at DESC, id DESC);
CREATE INDEX runs_outcome ON runs (outcome, created_at DESC, id DESC) WHERE outcome <> '';
CREATE INDEX runs_session ON runs (session_id, created_at DESC, id DESC) WHERE session_id <> '';
CREATE INDEX runs_task ON runs (task_id, created_at DESC, id DESC) WHERE task_id <> '';
CREATE INDEX runs_correlation ON runs (correlation_id) WHERE correlation_id <> '';
-- The work queue: unfinished runs by node, oldest claim first.
CREATE INDEX runs_queue ON runs (node, state, claimed_at) WHERE state <> 'finished';

-- Idempotency keys: the same key from the same principal within 24 hours
-- returns the same run. A key older than that may be taken again, so the
-- row is replaced rather than kept unique forever.
CREATE TABLE idempotency_keys (
    principal  text        NOT NULL,
    key        text        NOT NULL,
    run_id     text        NOT NULL REFERENCES runs (id),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (principal, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE runs;
