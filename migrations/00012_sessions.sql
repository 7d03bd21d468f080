-- Sessions: long-lived sandboxes whose commands are runs (runs.session_id
-- names the session). A row keeps the session's state, times and admitted
-- spec; the document column holds the session as the API serves it.

-- +goose Up
CREATE TABLE sessions (
    id             text        PRIMARY KEY,
    team           text        NOT NULL DEFAULT '',
    node           text        NOT NULL DEFAULT '',
    state          text        NOT NULL CHECK (state IN ('open', 'ended')),
    created_at     timestamptz NOT NULL,
    last_active_at timestamptz NOT NULL,
    ended_at       timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    document       jsonb       NOT NULL
);
CREATE INDEX sessions_created ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_team ON sessions (team, created_at DESC, id DESC);
-- Reconciliation after a restart: the open sessions of a node.
CREATE INDEX sessions_open ON sessions (node) WHERE state = 'open';

REVOKE ALL ON sessions FROM PUBLIC;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        GRANT SELECT, INSERT, UPDATE ON sessions TO sandgate_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE sessions;
