#!/usr/bin/env bash
# Removes the test containers and stops what containers/prepare.sh started (nothing else).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ -f "$here/.env" ] && . "$here/.env"
if docker info >/dev/null 2>&1; then
    ids=$(docker ps -aq --filter label=fencing.test=1)
    [ -n "$ids" ] && docker rm -f $ids >/dev/null
fi
if grep -qx dockerd "$here/.state/started" 2>/dev/null; then
    kill "$(cat /run/fencing-docker.pid)" 2>/dev/null
    for _ in $(seq 1 50); do [ -e /run/fencing-docker.pid ] || break; sleep 0.2; done
    # dockerd leaves its netns mount and the docker0 link behind.
    umount /run/fencing-docker/netns/default 2>/dev/null
    ip link delete docker0 2>/dev/null
    : > "$here/.state/started"
fi
exit 0
