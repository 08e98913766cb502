#!/bin/sh
# Entry point of the locally built PostgreSQL test image: a fresh cluster with trust
# authentication for every address (the tests connect over the bridge), user `postgres`,
# database `test`, UTF-8 (as every production cluster; SQL_ASCII cannot hold the Unicode the
# tests write); extra arguments (e.g. `-c fsync=off`) go to the server.
set -e
bin=$(ls -d /usr/lib/postgresql/*/bin | head -n 1)
data=/var/lib/postgresql/data
if [ ! -s "$data/PG_VERSION" ]; then
    mkdir -p "$data" /run/postgresql
    chown -R postgres:postgres "$data" /run/postgresql
    su postgres -s /bin/sh -c "$bin/initdb -D $data --auth=trust --username=postgres --encoding=UTF8 --no-locale" >/dev/null
    echo "host all all 0.0.0.0/0 trust" >> "$data/pg_hba.conf"
    su postgres -s /bin/sh -c "$bin/postgres --single -D $data postgres" <<SQL >/dev/null
CREATE DATABASE test;
SQL
fi
exec su postgres -s /bin/sh -c "exec $bin/postgres -D $data -c listen_addresses='*' $*"
