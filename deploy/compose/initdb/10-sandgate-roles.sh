#!/bin/sh
# Runs once, when the postgres container initialises an empty data
# directory: the gateway's login role sandgate_gw, a member of
# sandgate_app. The migrations (the migrate service, as the owner) grant
# sandgate_app INSERT and SELECT on the audit tables; making the group role
# here first is harmless, migration 3 tolerates it.
set -eu
psql -X -v ON_ERROR_STOP=1 -v pw="$SANDGATE_GW_PASSWORD" --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
SELECT 'CREATE ROLE sandgate_app NOLOGIN'
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') \gexec
SELECT format('CREATE ROLE sandgate_gw LOGIN PASSWORD %L IN ROLE sandgate_app', :'pw')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_gw') \gexec
SQL
