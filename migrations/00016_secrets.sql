-- The secrets runs use through the egress proxy without holding them
-- (docs/secrets.md). A row holds a secret's last version: its value
-- encrypted with AES-256-GCM under a data key of its own (ciphertext),
-- the data key wrapped with AES-256-GCM under the key-encryption key
-- key_id names (wrapped_key), both bound to the name and version, and
-- the value's keyed hash. Never a value in clear. A removed secret keeps
-- its row without ciphertexts, so that a name's versions never repeat.

-- +goose Up
CREATE TABLE secrets (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9_-]{1,64}$'),
    version     bigint NOT NULL CHECK (version > 0),
    key_id      text,
    wrapped_key bytea,
    ciphertext  bytea,
    value_hash  text,
    set_by      text NOT NULL,
    set_at      timestamptz NOT NULL,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL,
    deleted_at  timestamptz,
    CHECK ((deleted_at IS NULL) = (key_id IS NOT NULL AND wrapped_key IS NOT NULL AND ciphertext IS NOT NULL AND value_hash IS NOT NULL))
);
REVOKE ALL ON secrets FROM PUBLIC;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        GRANT SELECT, INSERT, UPDATE ON secrets TO sandgate_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE secrets;
