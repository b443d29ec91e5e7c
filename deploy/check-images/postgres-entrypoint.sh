#!/bin/sh
# The first start on an empty volume makes the cluster, its user (password-checked over TCP) and database,
# as the postgres image does; later starts find PG_VERSION and serve the data as it is.
set -eu

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    password_file=$(mktemp)
    printf '%s' "$POSTGRES_PASSWORD" > "$password_file"
    # UTF8 as the postgres image makes it; the C locale of a bare container would give SQL_ASCII, whose text
    # psycopg returns as bytes.
    initdb --username="$POSTGRES_USER" --pwfile="$password_file" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8
    rm -f "$password_file"
    echo 'host all all all scram-sha-256' >> "$PGDATA/pg_hba.conf"
    echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\"" | postgres --single -D "$PGDATA" postgres
fi
exec postgres -c listen_addresses='*'
