#!/usr/bin/env bash
# `make compose-check`: docker-compose.yml run for real with Docker and docker-compose, on a box without GPUs
# and without an image registry. The images come from Debian (debootstrap), torch from the host's pip config
# (its local wheels), the rest of Trainyard's dependencies from PyPI, as in a real build. It checks that the
# stack becomes healthy, that a CPU job succeeds, that its row and files survive `down` and `up`, and that the
# API and the worker run unprivileged. Any failure exits non-zero. Run as root (debootstrap, dockerd), with
# `apt-get install docker.io docker-compose debootstrap jq curl openssl`. How long it takes depends on the box
# and on what an earlier run left (docs/operations.md). `--defaults` prints the settings below and exits.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
# Each clone on a box gets its own work dir, project, image and ports, so that two clones' runs never meet:
# named after a hash of the checkout's path, the ports free ones when the run starts.
CHECKOUT=$(printf '%s' "$ROOT" | sha256sum | cut -c1-10)
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# The rootfs and wheels stay here between runs, and the images in Docker: a second run skips their builds.
WORK=${COMPOSE_CHECK_DIR:-/var/tmp/trainyard-compose-check-$CHECKOUT}
PROJECT=${COMPOSE_CHECK_PROJECT:-trainyard-check-$CHECKOUT}
API_PORT=${COMPOSE_CHECK_PORT:-$(free_port)}
# The torch and torchvision the image gets (a pair built for each other; a +cpu torch with PyPI's torchvision
# fails at `import torchvision`), taken from the host's local wheels alone: PIP_FIND_LINKS and these indexes
# (folders holding simple/). Their dependencies come from PyPI in the build.
TORCH_REQUIREMENTS=${COMPOSE_CHECK_TORCH:-torch==2.14.1 torchvision==0.29.1}
LOCAL_INDEXES=${COMPOSE_CHECK_LOCAL_INDEXES:-/opt/pypi-more /opt/pypi}
WHEELS_PORT=${COMPOSE_CHECK_WHEELS_PORT:-$(free_port)}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
JOB_TIMEOUT_S=${COMPOSE_CHECK_JOB_TIMEOUT_S:-900}
API="http://127.0.0.1:$API_PORT"
# Tagged apart from the registry's images and from a real deployment's trainyard:latest. Only Trainyard's
# image holds the checkout's code; the others are alike for every clone, which share them.
DEBIAN_IMAGE=trainyard-check/debian:bookworm
BASE_IMAGE=trainyard-check/base:bookworm
TRAINYARD_IMAGE=trainyard-check/trainyard:$CHECKOUT
declare -A SERVICE_IMAGES=([postgres]=trainyard-check/postgres:15 [redis]=trainyard-check/redis:7)
COMPOSE=(docker-compose -p "$PROJECT" -f "$WORK/compose.yml")

# Before the cleanup trap: printing the settings must touch nothing of a run's.
if [[ ${1:-} == --defaults ]]; then
    printf 'COMPOSE_CHECK_DIR=%s\nCOMPOSE_CHECK_PROJECT=%s\nCOMPOSE_CHECK_PORT=%s\nCOMPOSE_CHECK_WHEELS_PORT=%s\nIMAGE=%s\n' \
        "$WORK" "$PROJECT" "$API_PORT" "$WHEELS_PORT" "$TRAINYARD_IMAGE"
    exit 0
fi

step() { printf '\n== %s (%ss so far)\n' "$*" "$SECONDS"; }
fail() { printf 'compose-check FAILED: %s\n' "$*" >&2; exit 1; }
# A long build's output goes to $WORK/NAME.log; its end is shown when it fails.
logged() {
    local name=$1
    shift
    "$@" >"$WORK/$name.log" 2>&1 || { tail -40 "$WORK/$name.log" >&2; fail "$name failed (its log: $WORK/$name.log)"; }
}

# pid 1 may not be systemd (a container, a CI runner): start dockerd for this run and stop it afterwards.
started_dockerd=""
wheels_server=""
ensure_engine() {
    docker info >/dev/null 2>&1 && return
    command -v dockerd >/dev/null || fail "no Docker engine answers and dockerd is not installed (apt-get install docker.io docker-compose)"
    mkdir -p "$WORK"
    dockerd >"$WORK/dockerd.log" 2>&1 &
    started_dockerd=$!
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return; sleep 1; done
    tail -20 "$WORK/dockerd.log" >&2
    fail "dockerd did not answer within 60 s (its log: $WORK/dockerd.log)"
}

cleanup() {
    local status=$?
    if [[ $status -ne 0 && -f "$WORK/compose.yml" ]]; then
        "${COMPOSE[@]}" ps >&2 || true
        "${COMPOSE[@]}" logs --tail=40 >&2 || true
    fi
    if [[ -f "$WORK/compose.yml" && -z "${COMPOSE_CHECK_KEEP:-}" ]]; then
        "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    fi
    if [[ -n "$wheels_server" ]]; then
        kill "$wheels_server" || true
    fi
    if [[ -n "$started_dockerd" ]]; then
        kill "$started_dockerd" && wait "$started_dockerd" || true
    fi
    exit "$status"
}
trap cleanup EXIT

image_missing() { ! docker image inspect "$1" >/dev/null 2>&1; }

build_images() {
    local images=$ROOT/deploy/check-images
    if image_missing "$DEBIAN_IMAGE"; then
        step "debootstrap Debian bookworm and import it"
        rm -rf "$WORK/rootfs"
        logged debootstrap debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$WORK/rootfs" "$DEBIAN_MIRROR"
        tar --numeric-owner --one-file-system -C "$WORK/rootfs" -c . | docker import - "$DEBIAN_IMAGE"
    fi
    if image_missing "$BASE_IMAGE"; then
        step "the base: a venv with torch from the host's local wheels"
        build_base "$images"
    fi
    for name in postgres redis; do
        if image_missing "${SERVICE_IMAGES[$name]}"; then
            step "the $name image from Debian's package"
            logged "$name-build" docker build --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" -t "${SERVICE_IMAGES[$name]}" \
                -f "$images/$name.Dockerfile" "$images"
        fi
    done
}

# docker-compose.yml resolved with fresh passwords, less what needs a GPU or a registry; it holds the passwords.
# torch's wheels served on loopback for the base's build, the only build on the host's network: a build context
# would copy them into a layer of their own.
build_base() {
    local wheels=$WORK/wheels context=$WORK/base-context url=http://127.0.0.1:$WHEELS_PORT
    rm -rf "$wheels" "$context" && mkdir -p "$wheels" "$context"
    # shellcheck disable=SC2086,SC2046  # the requirements and options are words
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 -d "$wheels" $(local_index_options) $TORCH_REQUIREMENTS
    cp "$1/base.Dockerfile" "$context/Dockerfile"
    cp /etc/ssl/certs/ca-certificates.crt "$context/host-ca-certificates.crt"
    "$PY" -m http.server --bind 127.0.0.1 --directory "$wheels" "$WHEELS_PORT" >"$WORK/wheels-server.log" 2>&1 &
    wheels_server=$!
    logged base-build docker build --network host -t "$BASE_IMAGE" --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" \
        --build-arg WHEELS_URL="$url" --build-arg TORCH_WHEEL="$(basename "$wheels"/torch-*.whl)" \
        --build-arg TORCHVISION_WHEEL="$(basename "$wheels"/torchvision-*.whl)" "$context"
    kill "$wheels_server" && wait "$wheels_server" || true
    wheels_server=""
}

# pip's options that name the local indexes alone, so that nothing is downloaded (PIP_FIND_LINKS still applies).
local_index_options() {
    local option=--index-url dir
    for dir in $LOCAL_INDEXES; do
        printf '%s file://%s/simple ' "$option" "$dir"
        option=--extra-index-url
    done
}

write_compose_file() {
    mkdir -p "$WORK"
    (
        umask 077
        POSTGRES_PASSWORD=$(openssl rand -hex 16) REDIS_PASSWORD=$(openssl rand -hex 16) \
            docker-compose -p "$PROJECT" -f "$ROOT/docker-compose.yml" config \
            | "$PY" "$ROOT/deploy/compose_check_config.py" --api-port "$API_PORT" --base "$BASE_IMAGE" \
                --image "$TRAINYARD_IMAGE" --postgres "${SERVICE_IMAGES[postgres]}" \
                --redis "${SERVICE_IMAGES[redis]}" >"$WORK/compose.yml"
    )
}

wait_healthy() {
    local container
    container=$("${COMPOSE[@]}" ps -q api)
    for _ in $(seq 120); do
        case $(docker inspect -f '{{.State.Health.Status}}' "$container") in
            healthy) return ;;
            unhealthy) fail "the api container is unhealthy" ;;
        esac
        sleep 1
    done
    fail "the api did not become healthy within 120 s"
}

check_unprivileged() {
    local service uid
    for service in api worker; do
        uid=$("${COMPOSE[@]}" exec -T "$service" python -c "import os; print(os.stat('/proc/1').st_uid)")
        [[ $uid != 0 ]] || fail "$service runs as root"
        echo "$service: pid 1 runs as uid $uid ($("${COMPOSE[@]}" exec -T "$service" id -un))"
    done
}

call() { curl -fsS -H "Authorization: Bearer $TOKEN" "$@"; }

wait_for_job() {
    local job=$1 status
    for _ in $(seq "$JOB_TIMEOUT_S"); do
        status=$(call "$API/v1/jobs/$job" | jq -r .status)
        case $status in
            succeeded) return ;;
            failed | timed_out | cancelled) call "$API/v1/jobs/$job/logs" | jq -r .text >&2 || true
                fail "job $job ended $status" ;;
        esac
        sleep 1
    done
    fail "job $job did not finish within $JOB_TIMEOUT_S s"
}

# What must survive `down` and `up`: the job's row, its checkpoints' rows and a checkpoint's bytes.
job_fingerprint() {
    local job=$1 last
    call "$API/v1/jobs/$job" | jq -c '{id, status}'
    call "$API/v1/jobs/$job/checkpoints" | jq -c '[.data[] | {id, step, size_bytes}]'
    last=$(call "$API/v1/jobs/$job/checkpoints" | jq -r '.data[-1].download_url')
    [[ $last != null ]] || fail "job $job has no checkpoint"
    call "$API$last" | sha256sum
}

main() {
    ensure_engine
    echo "engine: $(docker version -f 'server {{.Server.Version}}'), $(docker-compose version --short)"
    build_images
    write_compose_file
    step "build the Trainyard image"
    logged trainyard-build "${COMPOSE[@]}" build
    local built=$SECONDS
    step "up"
    "${COMPOSE[@]}" up -d
    wait_healthy
    echo "healthy $((SECONDS - built)) s after the build"
    check_unprivileged
    TOKEN=$("${COMPOSE[@]}" exec -T api python -m core.keys create --user compose-check --admin 2>/dev/null | tr -d '\r')
    step "submit examples/digits_ddp_cpu.json"
    local job submitted=$SECONDS before
    job=$(call -X POST "$API/v1/jobs" -H 'content-type: application/json' \
        -d @"$ROOT/examples/digits_ddp_cpu.json" | jq -r .job.id)
    wait_for_job "$job"
    echo "job $job succeeded $((SECONDS - submitted)) s after submission"
    before=$(job_fingerprint "$job")
    step "down and up again"
    "${COMPOSE[@]}" down
    "${COMPOSE[@]}" up -d
    wait_healthy
    [[ $(job_fingerprint "$job") == "$before" ]] || fail "job $job or its files changed across down and up"
    printf '%s\n' "$before"
    step "compose-check passed"
}

main "$@"
