-- Transparency-log proofs over the trail.
--
-- Each chain is also an RFC 6962 Merkle tree whose leaves are its events'
-- hash values in seq order (leaf index = seq - 1). audit_tree_hashes keeps
-- the tree's stored hashes, numbered as golang.org/x/mod/sumdb/tlog
-- numbers them (StoredHashIndex). The stored hashes of consecutive leaves
-- have consecutive indexes, so each row holds a run of them: indexes
-- start_index to end_index - 1, 32 bytes each, concatenated (stored
-- uncompressed out of line, so that one hash is read without the rest).
-- A row per commit batch instead of a row per hash keeps the writer's
-- throughput (docs/benchmarks.md); an inclusion or consistency proof for
-- a tree of millions of leaves is still one query of a few dozen index
-- probes. They are derived data: anyone can recompute them from the
-- events, and a checkpoint note signs the root they give. A builder
-- beside each writer stores them, in order, as events are committed.
--
-- audit_checkpoints.note is the checkpoint as a C2SP signed note
-- (https://c2sp.org/tlog-checkpoint: origin, tree size, base64 root hash,
-- Ed25519 signature line by the node's checkpoint key), next to the
-- sandgate-checkpoint-v1 signature, which stays as it was.
--
-- audit_cosignatures keeps the witnesses' cosignatures of those notes
-- (https://c2sp.org/tlog-cosignature), served with the note.

-- +goose Up
CREATE TABLE audit_tree_hashes (
    chain_id    text   NOT NULL,
    start_index bigint NOT NULL CHECK (start_index >= 0),
    end_index   bigint NOT NULL CHECK (end_index > start_index),
    hashes      bytea  NOT NULL CHECK (length(hashes) = 32 * (end_index - start_index)),
    PRIMARY KEY (chain_id, start_index)
);
ALTER TABLE audit_tree_hashes ALTER COLUMN hashes SET STORAGE EXTERNAL;

ALTER TABLE audit_checkpoints ADD COLUMN note text;
CREATE INDEX audit_checkpoints_note ON audit_checkpoints (chain_id, id) WHERE note IS NOT NULL;

CREATE TABLE audit_cosignatures (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id    text        NOT NULL,
    tree_size   bigint      NOT NULL CHECK (tree_size >= 0),
    root_hash   bytea       NOT NULL CHECK (length(root_hash) = 32),
    witness     text        NOT NULL,
    witness_key text        NOT NULL,
    signature   text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chain_id, tree_size, witness_key)
);

CREATE TRIGGER audit_tree_hashes_no_update BEFORE UPDATE OR DELETE ON audit_tree_hashes
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_tree_hashes_no_truncate BEFORE TRUNCATE ON audit_tree_hashes
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
ALTER TABLE audit_tree_hashes ENABLE ALWAYS TRIGGER audit_tree_hashes_no_update;
ALTER TABLE audit_tree_hashes ENABLE ALWAYS TRIGGER audit_tree_hashes_no_truncate;

CREATE TRIGGER audit_cosignatures_no_update BEFORE UPDATE OR DELETE ON audit_cosignatures
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_cosignatures_no_truncate BEFORE TRUNCATE ON audit_cosignatures
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
ALTER TABLE audit_cosignatures ENABLE ALWAYS TRIGGER audit_cosignatures_no_update;
ALTER TABLE audit_cosignatures ENABLE ALWAYS TRIGGER audit_cosignatures_no_truncate;

REVOKE ALL ON audit_tree_hashes, audit_cosignatures FROM PUBLIC;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        GRANT SELECT, INSERT ON audit_tree_hashes, audit_cosignatures TO sandgate_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE audit_cosignatures;
DROP INDEX audit_checkpoints_note;
ALTER TABLE audit_checkpoints DROP COLUMN note;
DROP TABLE audit_tree_hashes;
