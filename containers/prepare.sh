#!/usr/bin/env bash
# Prepares a machine with no image registry to run the test suite's containers:
#   1. a Docker engine: the one DOCKER_HOST names, or the default socket, or — if none
#      answers — Debian's docker.io, installed if missing and started with its own roots;
#   2. the test images (PostgreSQL, MariaDB, Redis, the moto S3/DynamoDB emulator), built
#      locally from Debian's packages and PyPI (one debootstrap root turned into four images
#      with `docker import`), unless they exist already.
# It writes the environment the tests need to containers/.env (source it) and records what it
# started so that containers/teardown.sh stops exactly that.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
state="$here/.state"
mkdir -p "$state"
: > "$state/started"

engine_answers() { docker info >/dev/null 2>&1; }

if ! engine_answers; then
    export DOCKER_HOST=unix:///run/fencing-docker.sock
    if ! engine_answers; then
        if ! command -v dockerd >/dev/null 2>&1; then
            echo "installing Debian's docker.io"
            apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io
        fi
        mkdir -p /var/lib/fencing-docker /run/fencing-docker
        # No iptables here; keep the default bridge (--bridge=none breaks port publishing).
        nohup dockerd --iptables=false --ip-masq=false \
            --data-root /var/lib/fencing-docker --exec-root /run/fencing-docker \
            -H "$DOCKER_HOST" --pidfile /run/fencing-docker.pid \
            >"$state/dockerd.log" 2>&1 &
        echo dockerd >> "$state/started"
        for _ in $(seq 1 100); do engine_answers && break; sleep 0.2; done
        engine_answers || { tail -20 "$state/dockerd.log"; echo "dockerd did not start" >&2; exit 1; }
    fi
fi
echo "Docker engine: ${DOCKER_HOST:-default socket} ($(docker version --format '{{.Server.Version}}'))"

# The tag names the recipe: a change to this script or the entry point builds new images.
moto_launcher="$here/../crates/fencing-test-support/moto/one_request_at_a_time.py"
recipe="local-$(cat "$here/prepare.sh" "$here/postgres-entrypoint.sh" "$here/mariadb-entrypoint.sh" \
    "$moto_launcher" | sha256sum | cut -c1-12)"
postgres_image="${FENCING_POSTGRES_IMAGE:-fencing-test/postgres}:${FENCING_POSTGRES_TAG:-$recipe}"
mariadb_image="${FENCING_MARIADB_IMAGE:-fencing-test/mariadb}:${FENCING_MARIADB_TAG:-$recipe}"
redis_image="${FENCING_REDIS_IMAGE:-fencing-test/redis}:${FENCING_REDIS_TAG:-$recipe}"
moto_image="${FENCING_MOTO_IMAGE:-fencing-test/moto}:${FENCING_MOTO_TAG:-$recipe}"

if ! docker image inspect "$postgres_image" "$mariadb_image" "$redis_image" "$moto_image" >/dev/null 2>&1; then
    root="$(mktemp -d /var/tmp/fencing-root.XXXXXX)"
    trap 'rm -rf "$root"' EXIT
    mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    command -v debootstrap >/dev/null 2>&1 || {
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
    }
    echo "debootstrap bookworm (postgresql, mariadb-server, redis-server, python3) into $root"
    debootstrap --variant=minbase \
        --include=postgresql,mariadb-server,redis-server,python3,python3-venv \
        bookworm "$root" "${mirror:-http://deb.debian.org/debian}" \
        >"$state/debootstrap.log" 2>&1 || { tail -20 "$state/debootstrap.log"; exit 1; }
    install -m 0755 "$here/postgres-entrypoint.sh" "$root/usr/local/bin/postgres-entrypoint"
    install -m 0755 "$here/mariadb-entrypoint.sh" "$root/usr/local/bin/mariadb-entrypoint"
    # moto answering one request at a time, so that its conditional writes are atomic.
    install -m 0644 "$moto_launcher" "$root/usr/local/lib/moto-one-request-at-a-time.py"
    # moto with only what its S3 and DynamoDB server needs (moto[server] pulls ~290 MB more).
    # pip in the root trusts the host's CA bundle, which may hold a proxy's CA.
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    cp /etc/ssl/certs/ca-certificates.crt "$root/tmp/host-ca.crt"
    echo "pip install moto[s3,dynamodb] flask flask-cors into /opt/moto"
    chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root sh -c \
        'python3 -m venv /opt/moto && /opt/moto/bin/pip install -q --cert /tmp/host-ca.crt \
         "moto[s3,dynamodb]" flask flask-cors' >"$state/pip.log" 2>&1 \
        || { tail -20 "$state/pip.log"; exit 1; }
    rm -f "$root/tmp/host-ca.crt"
    rm -rf "$root/root/.cache"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | docker import \
        --change 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]' \
        --change 'EXPOSE 5432' - "$postgres_image"
    tar -C "$root" -c . | docker import \
        --change 'ENTRYPOINT ["/usr/local/bin/mariadb-entrypoint"]' \
        --change 'EXPOSE 3306' - "$mariadb_image"
    tar -C "$root" -c . | docker import \
        --change 'ENTRYPOINT ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]' \
        --change 'EXPOSE 6379' - "$redis_image"
    tar -C "$root" -c . | docker import \
        --change 'ENTRYPOINT ["/opt/moto/bin/python3", "/usr/local/lib/moto-one-request-at-a-time.py", "-H", "0.0.0.0", "-p", "5000"]' \
        --change 'EXPOSE 5000' - "$moto_image"
fi

cat > "$here/.env" <<ENV
export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}
export FENCING_POSTGRES_IMAGE=${postgres_image%:*}
export FENCING_POSTGRES_TAG=${postgres_image##*:}
export FENCING_MARIADB_IMAGE=${mariadb_image%:*}
export FENCING_MARIADB_TAG=${mariadb_image##*:}
export FENCING_REDIS_IMAGE=${redis_image%:*}
export FENCING_REDIS_TAG=${redis_image##*:}
export FENCING_MOTO_IMAGE=${moto_image%:*}
export FENCING_MOTO_TAG=${moto_image##*:}
ENV
echo "images ready: $postgres_image $mariadb_image $redis_image $moto_image (environment in containers/.env)"
