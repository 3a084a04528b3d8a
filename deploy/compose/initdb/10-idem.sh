#!/bin/sh
# Runs once, on the first start of an empty PostgreSQL volume (docker-entrypoint-initdb.d):
# idem's own role and database. idem creates its tables itself at start.
set -eu
psql -v ON_ERROR_STOP=1 -v pw="$IDEM_DB_PASSWORD" --username "$POSTGRES_USER" --dbname postgres <<'SQL'
CREATE ROLE idem LOGIN PASSWORD :'pw';
CREATE DATABASE idem OWNER idem;
SQL
