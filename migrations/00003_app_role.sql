-- The application role serve runs as: it may append to the audit trail and
-- read it, never change or remove it; on runs it may do what the API needs.
--
-- sandgate_app is NOLOGIN: roles are cluster-wide, so the migration cannot
-- pick a password. An operator grants it to a login role, for example
--   CREATE ROLE sandgate_gw LOGIN PASSWORD '…' IN ROLE sandgate_app;
-- (or, with peer authentication, a role named like the service's Unix user)
-- and points SANDGATE_DATABASE_URL at that login with SANDGATE_MIGRATE=false:
-- the owner runs `sandgate migrate up`, the gateway never owns the tables.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    -- A role that exists already (roles are cluster-wide) is reused, so a
    -- migrating role without CREATEROLE works once an administrator has
    -- created sandgate_app.
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        CREATE ROLE sandgate_app NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    -- Another database of this cluster created it at the same moment.
    NULL;
END
$$;
-- +goose StatementEnd

-- The writer copies batches through a temporary staging table.
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO sandgate_app', current_database());
END
$$;
-- +goose StatementEnd

REVOKE ALL ON audit_events, audit_checkpoints, audit_chains FROM PUBLIC;
REVOKE ALL ON runs, idempotency_keys FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO sandgate_app;
GRANT SELECT, INSERT ON audit_events, audit_checkpoints, audit_chains TO sandgate_app;
GRANT SELECT, INSERT, UPDATE ON runs TO sandgate_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO sandgate_app;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('REVOKE CONNECT, TEMPORARY ON DATABASE %I FROM sandgate_app', current_database());
END
$$;
-- +goose StatementEnd
REVOKE ALL ON audit_events, audit_checkpoints, audit_chains FROM sandgate_app;
REVOKE ALL ON runs, idempotency_keys FROM sandgate_app;
REVOKE USAGE ON SCHEMA public FROM sandgate_app;
