#!/usr/bin/env bash
# End-to-end test of the container image: build it, run it on a volume, claim and complete a
# key through the published port, `docker kill` it, start a new container on the same volume
# and check that nothing acknowledged was lost; report the image size.
#
#   deploy/container/test.sh --binary PATH
#
# Needs a Docker engine. When none answers it tries to start one (Debian's docker.io:
# installed with apt-get when missing, dockerd with the vfs storage driver); if that is not
# possible on this machine it prints "skipped: no Docker engine" with the reason and exits 0,
# so CI on hosts without one still passes.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BIN="$2"; shift 2 ;;
    *) echo "usage: $0 --binary PATH" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "usage: $0 --binary PATH (an idem release binary)" >&2; exit 2; }

STATE="${IDEM_DOCKER_STATE:-$HOME/.cache/idem/docker}"
STARTED_PID=""
CID=""
VOL="idem-test-$$"
TAG="idem:test-$$"

cleanup() {
  if docker info >/dev/null 2>&1; then
    [ -n "$CID" ] && docker rm -f "$CID" >/dev/null 2>&1 || true
    docker volume rm "$VOL" >/dev/null 2>&1 || true
    docker image rm "$TAG" >/dev/null 2>&1 || true
  fi
  if [ -n "$STARTED_PID" ]; then
    kill "$STARTED_PID" 2>/dev/null || true
    wait "$STARTED_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

skip() {
  echo "skipped: no Docker engine ($1)"
  exit 0
}

# ------------------------------------------------------------------ an engine
if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q docker.io >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q docker.io >/dev/null 2>&1; } ||
        skip "apt-get install docker.io failed"
    else
      skip "no dockerd and no way to install it"
    fi
  fi
  command -v docker >/dev/null || skip "no docker client"
  mkdir -p "$STATE"
  # vfs works on any file system (no overlay mounts); no iptables, so it also starts in
  # containers and sandboxes that may not change the host's firewall.
  dockerd --storage-driver=vfs --iptables=false --ip6tables=false \
    --data-root "$STATE/root" --exec-root "$STATE/exec" --pidfile "$STATE/dockerd.pid" \
    >"$STATE/dockerd.log" 2>&1 &
  STARTED_PID=$!
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$STARTED_PID" 2>/dev/null || break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    STARTED_PID=""
    skip "dockerd did not start: $(grep -iE 'level=(fatal|error)' "$STATE/dockerd.log" | tail -n 1)"
  fi
fi

# ------------------------------------------------------------------ build
bash deploy/container/build.sh --binary "$BIN" --tag "$TAG"

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
docker volume create "$VOL" >/dev/null
# Listening beyond loopback needs a token: create one on the volume first.
TOKEN="$(docker run --rm -v "$VOL:/data" "$TAG" token create --namespace '*' --role admin --label test)"
[ -n "$TOKEN" ] || { echo "FAIL: no token" >&2; exit 1; }

start() {
  CID="$(docker run -d -v "$VOL:/data" -p "127.0.0.1:$PORT:7780" "$TAG")"
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  docker logs "$CID" >&2 || true
  echo "FAIL: the container did not answer /healthz on port $PORT" >&2
  exit 1
}

api() {
  curl -sS -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' "$@"
}

B="http://127.0.0.1:$PORT/v1/namespaces/ci/keys"
start
# The image's own HEALTHCHECK (idem healthcheck, no curl inside) turns the container healthy.
for _ in $(seq 1 60); do
  [ "$(docker inspect -f '{{.State.Health.Status}}' "$CID")" = healthy ] && break
  sleep 0.5
done
HEALTH="$(docker inspect -f '{{.State.Health.Status}}' "$CID")"
[ "$HEALTH" = healthy ] || { echo "FAIL: health is $HEALTH" >&2; docker inspect -f '{{json .State.Health}}' "$CID" >&2; exit 1; }
USER_IN="$(docker inspect -f '{{.Config.User}}' "$CID")"
[ "$USER_IN" = "10001:10001" ] || { echo "FAIL: runs as $USER_IN" >&2; exit 1; }

CLAIM="$(api -XPOST "$B/evt_1:charge/claim" -d '{"payload": {"amount": 4200}}')"
LEASE="$(printf '%s' "$CLAIM" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["outcome"]=="acquired", d; print(d["token"])')"
api -XPOST "$B/evt_1:charge/complete" -d "{\"token\": \"$LEASE\", \"result\": {\"charge\": \"ch_1\"}, \"external_ref\": \"ch_1\"}" >/dev/null
# A second key acquired but never completed: its lease must survive the kill too.
api -XPOST "$B/evt_2:charge/claim" -d '{"payload": {"amount": 1}}' >/dev/null

docker kill "$CID" >/dev/null
docker rm "$CID" >/dev/null
CID=""
start

REPLAY="$(api -XPOST "$B/evt_1:charge/claim" -d '{"payload": {"amount": 4200}}')"
printf '%s' "$REPLAY" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["outcome"] == "completed", d
assert d["record"]["external_ref"] == "ch_1", d
assert d["record"]["result"] == {"charge": "ch_1"}, d
'
HELD="$(api "$B/evt_2:charge")"
printf '%s' "$HELD" | python3 -c '
import json, sys
d = json.load(sys.stdin)
state = d.get("state") or d.get("record", {}).get("state")
assert state == "processing", d
'
SIZE="$(docker image inspect --format '{{.Size}}' "$TAG")"
echo "container: claim, complete, kill, restart on the same volume: nothing lost; image $((SIZE / 1024 / 1024)) MiB ($SIZE bytes)"
