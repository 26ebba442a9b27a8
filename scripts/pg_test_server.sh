#!/usr/bin/env bash
# Throw-away PostgreSQL server on 127.0.0.1 for sweep tests and .ci/run (Debian's postgresql-15 binaries).
#
#   scripts/pg_test_server.sh start DIR [PORT]   # initdb into DIR, start, print the SQLAlchemy URL
#   scripts/pg_test_server.sh stop DIR           # stop it (DIR can then be deleted)
#
# Trust auth, listening on 127.0.0.1 only, socket inside DIR. As root, the cluster runs as the
# `postgres` user (initdb refuses root). PG_BIN overrides the binary folder.
set -euo pipefail

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
cmd=${1:?usage: $0 start DIR [PORT] | stop DIR}
dir=${2:?usage: $0 start DIR [PORT] | stop DIR}

if [[ -z "$PG_BIN" || ! -x "$PG_BIN/initdb" ]]; then
  echo "pg_test_server: PostgreSQL server binaries not found (apt-get install postgresql)" >&2
  exit 3
fi

as_owner() {  # run a command as the cluster owner
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case "$cmd" in
  start)
    port=${3:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
    mkdir -p "$dir"
    if [[ $(id -u) -eq 0 ]]; then chown postgres "$dir"; fi
    chmod 700 "$dir"
    as_owner "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1
    as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=100 -c fsync=off" start >/dev/null
    echo "postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
    ;;
  stop)
    as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  *)
    echo "usage: $0 start DIR [PORT] | stop DIR" >&2
    exit 2
    ;;
esac
