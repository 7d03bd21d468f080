-- A run's captured output is kept as the bytes it was, not as JSON text:
-- the jsonb columns stdout and stderr keep its encoding, size, truncation
-- and digest, and stdout_data and stderr_data the bytes themselves, which
-- a control character or invalid UTF-8 cannot inflate. Rows written before
-- keep their data in the jsonb columns and are read as they were.

-- +goose Up
ALTER TABLE runs ADD COLUMN stdout_data bytea, ADD COLUMN stderr_data bytea;

-- +goose Down
ALTER TABLE runs DROP COLUMN stdout_data, DROP COLUMN stderr_data;
