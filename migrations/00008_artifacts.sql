-- Artifacts: the files runs leave, stored by the SHA-256 of their bytes so
-- that the same bytes are kept once however many runs leave them.
--
-- blobs has one row per stored content; blob_chunks holds its bytes in
-- chunks of 1 MiB, so that a blob is written and read a chunk at a time
-- (and a range request reads only the chunks it covers). A blob being
-- written has its chunks under an upload key ('upload:<uuid>') until its
-- digest is known; they are then renamed to the digest, or dropped when
-- the blob exists already. run_artifacts lists each run's files.
-- runs.artifacts is the summary a run carries.

-- +goose Up
CREATE TABLE blobs (
    sha256     text        PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size       bigint      NOT NULL CHECK (size >= 0),
    chunks     integer     NOT NULL CHECK (chunks >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE blob_chunks (
    sha256 text    NOT NULL,
    seq    integer NOT NULL CHECK (seq >= 0),
    data   bytea   NOT NULL,
    PRIMARY KEY (sha256, seq)
);

CREATE TABLE run_artifacts (
    run_id text    NOT NULL REFERENCES runs (id),
    path   text    NOT NULL,
    sha256 text    NOT NULL REFERENCES blobs (sha256),
    size   bigint  NOT NULL CHECK (size >= 0),
    mode   integer NOT NULL,
    PRIMARY KEY (run_id, path)
);
CREATE INDEX run_artifacts_blob ON run_artifacts (sha256);

ALTER TABLE runs ADD COLUMN artifacts jsonb;

REVOKE ALL ON blobs, blob_chunks, run_artifacts FROM PUBLIC;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        GRANT SELECT, INSERT ON blobs, run_artifacts TO sandgate_app;
        GRANT SELECT, INSERT, UPDATE, DELETE ON blob_chunks TO sandgate_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE runs DROP COLUMN artifacts;
DROP TABLE run_artifacts;
DROP TABLE blob_chunks;
DROP TABLE blobs;
