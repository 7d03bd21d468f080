-- What a finished run's container used (sandgate.Usage): CPU time, memory
-- and pids peaks, block I/O, network bytes, wall time, and how they were
-- measured, as the JSON object the API answers with. NULL while the run
-- goes on, for a run whose command never ran, and for rows written before.

-- +goose Up
ALTER TABLE runs ADD COLUMN usage jsonb;

-- +goose Down
ALTER TABLE runs DROP COLUMN usage;
