-- Who did it, and who approved it.
--
-- runs (and sessions, in their document) keep how their principal signed in (sign_in: method,
-- issuer, subject, email, as the trail keeps them: keyed hashes where the
-- site masks them), so that every event of a run, adopted after a
-- restart too, names the person; and the approval they waited for, when
-- a policy answered require_approval: such a run or session is stored
-- pending_approval, with no container, until it is approved (then pending
-- or open), or denied or expired (then finished or ended, rejected).
--
-- approvals: one row per request that waits, with who asked, the
-- reasons, the request's spec (secrets as keyed hashes) and the node that
-- holds its secret values in memory; granted, denied or expired once, by
-- a conditional UPDATE, so that of two approvers at once one wins.

-- +goose Up
ALTER TABLE runs ADD COLUMN sign_in jsonb;
ALTER TABLE runs ADD COLUMN approval_id text NOT NULL DEFAULT '';
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check CHECK (state IN ('pending_approval', 'pending', 'creating', 'running', 'finished'));
ALTER TABLE sessions DROP CONSTRAINT IF EXISTS sessions_state_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_state_check CHECK (state IN ('pending_approval', 'open', 'ended'));

CREATE TABLE approvals (
    id                text        PRIMARY KEY,
    status            text        NOT NULL CHECK (status IN ('pending', 'granted', 'denied', 'expired')),
    operation         text        NOT NULL CHECK (operation IN ('run', 'session')),
    run_id            text        NOT NULL DEFAULT '',
    session_id        text        NOT NULL DEFAULT '',
    correlation_id    text        NOT NULL,
    decision_id       text        NOT NULL,
    policy_revision   text        NOT NULL DEFAULT '',
    requester         text        NOT NULL,
    team              text        NOT NULL,
    requester_roles   jsonb       NOT NULL,
    requester_sign_in jsonb       NOT NULL,
    reasons           jsonb       NOT NULL,
    node              text        NOT NULL,
    spec              jsonb       NOT NULL,
    limits            jsonb,
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    decided_at        timestamptz,
    decided_by        text        NOT NULL DEFAULT '',
    decider_sign_in   jsonb,
    comment           text        NOT NULL DEFAULT ''
);
CREATE INDEX approvals_pending ON approvals (expires_at) WHERE status = 'pending';
CREATE INDEX approvals_created ON approvals (created_at DESC, id DESC);
CREATE INDEX approvals_team ON approvals (team, created_at DESC, id DESC);

REVOKE ALL ON approvals FROM PUBLIC;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        GRANT SELECT, INSERT, UPDATE ON approvals TO sandgate_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE approvals;
UPDATE sessions SET state = 'ended' WHERE state = 'pending_approval';
ALTER TABLE sessions DROP CONSTRAINT IF EXISTS sessions_state_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_state_check CHECK (state IN ('open', 'ended'));
UPDATE runs SET state = 'finished', outcome = 'error' WHERE state = 'pending_approval';
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check CHECK (state IN ('pending', 'creating', 'running', 'finished'));
ALTER TABLE runs DROP COLUMN approval_id;
ALTER TABLE runs DROP COLUMN sign_in;
