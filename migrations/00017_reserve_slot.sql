-- A team's run slot reserved in one statement: the team's advisory lock,
-- the count of what it holds and the insert, in a function, so that the
-- lock is held for the statement and its commit only, not across the
-- round trips of a transaction the client drives (at 16 submitters of one
-- team those round trips queued them behind each other: BenchmarkScaleSubmissionDB).
-- The function is VOLATILE: its count, after the lock, sees every slot
-- committed by the lock's previous holder.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION sandgate_reserve_slot(p_run text, p_team text, p_node text, p_memory_mb bigint, p_cpus double precision,
    max_runs bigint, max_memory_mb bigint, max_cpus double precision,
    OUT team_runs bigint, OUT team_memory_mb bigint, OUT team_cpus double precision, OUT reserved boolean)
LANGUAGE plpgsql VOLATILE SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('sandgate-team:' || p_team, 0));
    SELECT count(*), coalesce(sum(memory_mb), 0), coalesce(sum(cpus), 0)
        INTO team_runs, team_memory_mb, team_cpus FROM run_slots WHERE team = p_team;
    reserved := NOT ((max_runs > 0 AND team_runs >= max_runs)
        OR (max_memory_mb > 0 AND team_memory_mb + p_memory_mb > max_memory_mb)
        OR (max_cpus > 0 AND team_cpus + p_cpus > max_cpus + 1e-9));
    IF reserved THEN
        INSERT INTO run_slots (run_id, team, node, memory_mb, cpus) VALUES (p_run, p_team, p_node, p_memory_mb, p_cpus)
            ON CONFLICT (run_id) DO NOTHING;
    END IF;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION sandgate_reserve_slot(text, text, text, bigint, double precision, bigint, bigint, double precision) FROM PUBLIC;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN
        GRANT EXECUTE ON FUNCTION sandgate_reserve_slot(text, text, text, bigint, double precision, bigint, bigint, double precision)
            TO sandgate_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION sandgate_reserve_slot(text, text, text, bigint, double precision, bigint, bigint, double precision);
