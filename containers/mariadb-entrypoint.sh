#!/bin/sh
# Entry point of the locally built MariaDB test image: Debian's MariaDB with its own
# configuration (as the machine's server runs it), user `root` without a password from any
# address (the tests connect over the bridge), a database `test`; extra arguments go to the
# server.
set -e
data=/var/lib/mysql
mkdir -p /run/mysqld
chown mysql:mysql /run/mysqld
if [ ! -d "$data/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$data" --auth-root-authentication-method=normal \
        --skip-test-db >/dev/null
fi
# Run by the server at every start, before it takes connections: idempotent.
cat >/run/mysqld/init.sql <<SQL
CREATE USER IF NOT EXISTS 'root'@'%';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS test;
SQL
chown mysql:mysql /run/mysqld/init.sql
exec mariadbd --user=mysql --datadir="$data" --bind-address=0.0.0.0 --port=3306 \
    --skip-name-resolve --init-file=/run/mysqld/init.sql "$@"
