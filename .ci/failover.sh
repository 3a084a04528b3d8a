#!/usr/bin/env bash
# Database faults under load, with the history checker (`idem bench --fault-cmd`):
#   outage   PostgreSQL behind PgBouncer (transaction mode) killed with kill -9 and started
#            again, idem behind the pooler throughout;
#   sync     a primary and a synchronous standby (Debian's PostgreSQL: initdb, pg_basebackup -R,
#            streaming replication, synchronous_standby_names = '*'), idem given both hosts with
#            target_session_attrs=read-write; the primary killed with kill -9 (postmaster and
#            every backend, as a crashed machine) and the standby promoted with pg_ctl promote;
#   async    the same with asynchronous replication (what it loses is measured, not judged);
#   sync-lag, async-lag  the same with a standby that has fallen behind: the primary's WAL
#            sender stopped for IDEM_FAULT_LAG_MS (300) before the primary dies;
#   patroni  automatic failover: two PostgreSQL servers under Patroni (Debian's patroni and
#            etcd-server, installed when missing; one etcd member; synchronous_mode, ttl 20 s),
#            the leader's machine "dies" (its Patroni and its PostgreSQL killed with kill -9)
#            and Patroni promotes the synchronous standby by itself; nobody runs pg_ctl.
# Every server runs as the postgres user on free loopback ports in a temp dir.
# Usage: .ci/failover.sh PATH/TO/idem [outage|sync|async ...]   (default: outage sync)
# Env: IDEM_FAULT_ROUND (load before and after the fault, default 3s), IDEM_FAULT_CLIENTS (16).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(realpath "$1")"
shift
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(outage sync)

PGBIN="${IDEM_PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)}"
round="${IDEM_FAULT_ROUND:-3s}"
clients="${IDEM_FAULT_CLIENTS:-16}"
work="$(mktemp -d)"
chmod 755 "$work"
chown postgres "$work" 2>/dev/null || true
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# kill -9 a cluster: the postmaster and every process it started (a crashed machine, not a
# shutdown: nothing is flushed, no backend says goodbye).
crash() {
  local pid
  pid="$(head -n1 "$1/postmaster.pid" 2>/dev/null || true)"
  [ -n "$pid" ] || return 0
  kill -9 "$pid" $(ps -o pid= --ppid "$pid") 2>/dev/null || true
}
cleanup() {
  # Patroni first (it would start a killed PostgreSQL again), then etcd.
  pkill -9 -f "patroni $work/" 2>/dev/null || true
  pkill -9 -f "etcd --name idem-drill --data-dir $work/" 2>/dev/null || true
  for d in "$work"/*/; do
    [ -f "$d/postmaster.pid" ] && crash "$d"
    [ -f "$d/pgbouncer.pid" ] && kill "$(cat "$d/pgbouncer.pid")" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT TERM

# new_primary DIR PORT (replication becomes synchronous later, once a standby streams: a commit
# would otherwise wait for a standby that does not exist yet)
new_primary() {
  as_pg "$PGBIN/initdb" -D "$1" -U postgres --auth=trust -A trust >/dev/null
  cat >>"$1/postgresql.conf" <<CONF
port = $2
listen_addresses = '127.0.0.1'
unix_socket_directories = '$work'
wal_level = replica
max_wal_senders = 4
wal_keep_size = '256MB'
max_connections = 100
shared_buffers = '64MB'
CONF
  echo "host replication postgres 127.0.0.1/32 trust" >>"$1/pg_hba.conf"
  as_pg "$PGBIN/pg_ctl" -D "$1" -l "$1.log" -w start >/dev/null
  as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$2" -U postgres idem
}

# new_standby DIR PORT PRIMARY_PORT SYNC(on|off)
new_standby() {
  local n=0
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$3" -U postgres -D "$1" -R -X stream -c fast >/dev/null
  echo "port = $2" >>"$1/postgresql.conf"
  as_pg "$PGBIN/pg_ctl" -D "$1" -l "$1.log" -w start >/dev/null
  for _ in $(seq 1 100); do
    n="$(psql -XAtq -h 127.0.0.1 -p "$3" -U postgres -c \
      "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")"
    [ "$n" = 1 ] && break
    sleep 0.1
  done
  [ "$n" = 1 ] || { echo "the standby did not start streaming" >&2; return 1; }
  [ "$4" = on ] || return 0
  psql -XAtq -h 127.0.0.1 -p "$3" -U postgres \
    -c "ALTER SYSTEM SET synchronous_standby_names = '*'" -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 1 100); do
    n="$(psql -XAtq -h 127.0.0.1 -p "$3" -U postgres -c \
      "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")"
    [ "$n" = 1 ] && return 0
    sleep 0.1
  done
  echo "the standby did not become synchronous" >&2
  return 1
}

# patroni_cluster NAME: one etcd member and two Patroni nodes (synchronous_mode) in
# $work/NAME; prints "PG1 PG2 REST2" once node 1 leads and node 2 is its synchronous standby.
patroni_cluster() {
  local dir="$work/$1" ec ep i pg rest pg1 n=""
  if ! command -v patroni >/dev/null || ! command -v etcd >/dev/null; then
    (DEBIAN_FRONTEND=noninteractive apt-get install -y -q patroni etcd-server >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q patroni etcd-server >/dev/null; }) ||
      { echo "cannot install patroni and etcd-server" >&2; return 1; }
  fi
  mkdir -p "$dir"
  chown postgres "$dir" 2>/dev/null || true
  ec="$(free_port)"; ep="$(free_port)"
  # Run from the cluster's own directory: Patroni's worker processes change into the
  # current directory, which the postgres user may not be allowed to enter (a clone in a
  # private temp dir).
  cd "$dir"
  as_pg etcd --name idem-drill --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
    --listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
    --initial-cluster "idem-drill=http://127.0.0.1:$ep" >"$dir/etcd.log" 2>&1 &
  for i in 1 2; do
    pg="$(free_port)"; rest="$(free_port)"
    echo "$pg $rest" >"$dir/n$i.ports"
    cat >"$dir/n$i.yml" <<YML
scope: idem-drill
name: n$i
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:$rest
  connect_address: 127.0.0.1:$rest
etcd3:
  hosts: 127.0.0.1:$ec
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 2
    retry_timeout: 5
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      parameters:
        wal_level: replica
        max_wal_senders: 4
        wal_keep_size: 256MB
        max_connections: 100
        shared_buffers: 64MB
  initdb:
  - auth: trust
  pg_hba:
  - local all all trust
  - host replication postgres 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$pg
  connect_address: 127.0.0.1:$pg
  data_dir: $dir/n$i
  bin_dir: $PGBIN
  pgpass: $dir/pgpass$i
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
  parameters:
    unix_socket_directories: $work
YML
    chown postgres "$dir/n$i.yml" 2>/dev/null || true
    as_pg patroni "$dir/n$i.yml" >"$dir/n$i.log" 2>&1 &
    # Node 1 bootstraps and leads; node 2 starts once it does, and clones it.
    if [ "$i" = 1 ]; then
      for _ in $(seq 1 300); do
        curl -sf -o /dev/null "http://127.0.0.1:$rest/primary" && break
        sleep 0.1
      done
    fi
  done
  for _ in $(seq 1 600); do
    n="$(curl -sf "http://127.0.0.1:$rest/cluster" 2>/dev/null | python3 -c '
import json, sys
m = {x["name"]: x for x in json.load(sys.stdin)["members"]}
ok = m.get("n1", {}).get("role") == "leader" and m.get("n2", {}).get("role") == "sync_standby" \
    and m["n2"].get("state") in ("running", "streaming")
print("ok" if ok else "")' 2>/dev/null || true)"
    [ "$n" = ok ] && break
    sleep 0.1
  done
  if [ "$n" != ok ]; then
    echo "the Patroni cluster did not settle (a leader and a synchronous standby)" >&2
    tail -n 20 "$dir"/n*.log "$dir/etcd.log" >&2
    return 1
  fi
  read -r pg1 _ <"$dir/n1.ports"
  as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$pg1" -U postgres idem >&2
  cd - >/dev/null
  echo "$pg1 $pg $rest"
}

report() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, what, must_hold = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
r = json.load(open(path))
v = r["verdict"]
print(f"{what}: {v['acknowledged']} acknowledged writes checked, lost {v['lost']}, "
      f"double acquisitions {v['double_acquired']}, bad states {v['bad_state']}; "
      f"503 store_unavailable {r['store_unavailable']}, other 5xx {r['other_5xx']}; "
      f"fault command {r['fault_cmd_ms']} ms, outage seen by clients {r['recovery_ms']} ms")
if must_hold and (v["lost"] or v["double_acquired"] or v["bad_state"] or
                  v["ambiguous_not_in_review"] or r["other_5xx"]):
    sys.exit(f"{what}: the history check failed")
PY
}

fault_run() { # NAME MUST_HOLD URL CMD
  local out="$work/$1.json" rc=0
  timeout 600 "$bin" bench --backend postgres --db "$3" --fault-cmd "$4" \
    --round-time "$round" --concurrency "$clients" --json "$out" >"$work/$1.out" 2>&1 || rc=$?
  if [ ! -s "$out" ]; then
    cat "$work/$1.out" >&2
    return 1
  fi
  report "$out" "$1" "$2" || return 1
  [ "$2" = 0 ] || [ "$rc" = 0 ]
}

n=0
for run in "${runs[@]}"; do
  n=$((n + 1))
  case "$run" in
    outage)
      d="$work/o$n"; p="$(free_port)"
      new_primary "$d" "$p"
      bport="$(IDEM_TEST_PG="postgres://postgres@127.0.0.1:$p/postgres" \
        bash .ci/pgbouncer.sh --start "$work/o$n-pgbouncer" transaction)"
      url="postgres://postgres@127.0.0.1:$bport/idem?pooler=transaction"
      { declare -f crash as_pg
        echo "crash '$d'; sleep 2; as_pg '$PGBIN/pg_ctl' -D '$d' -l '$d.log' -w start >/dev/null"
      } >"$work/fault$n.sh"
      fault_run "outage-through-pgbouncer" 1 "$url" "bash $work/fault$n.sh"
      ;;
    sync | async | sync-lag | async-lag)
      a="$work/a$n"; b="$work/b$n"; pa="$(free_port)"; pb="$(free_port)"
      sync="$([ "${run%-lag}" = sync ] && echo on || echo off)"
      new_primary "$a" "$pa"
      new_standby "$b" "$pb" "$pa" "$sync"
      url="postgres://postgres@127.0.0.1:$pa,127.0.0.1:$pb/idem?target_session_attrs=read-write"
      { declare -f crash as_pg
        if [ "$run" != "${run%-lag}" ]; then
          # A standby that has fallen behind: the primary's WAL sender (a child of its
          # postmaster) is stopped for IDEM_FAULT_LAG_MS before the primary dies, so what
          # was committed in that time never left the primary.
          echo "ws=\$(ps -o pid=,args= --ppid \$(head -n1 '$a/postmaster.pid') | awk '/walsender/ {print \$1}')"
          echo "kill -STOP \$ws; sleep $(awk "BEGIN {print ${IDEM_FAULT_LAG_MS:-300} / 1000}")"
          echo "crash '$a'"
        else
          echo "crash '$a'"
        fi
        echo "as_pg '$PGBIN/pg_ctl' -D '$b' -w promote >/dev/null"
      } >"$work/fault$n.sh"
      fault_run "failover-$run" "$([ "$sync" = on ] && echo 1 || echo 0)" "$url" \
        "bash $work/fault$n.sh"
      ;;
    patroni)
      patroni_cluster "p$n" >"$work/p$n.ports"
      read -r pa pb rb <"$work/p$n.ports"
      url="postgres://postgres@127.0.0.1:$pa,127.0.0.1:$pb/idem?target_session_attrs=read-write"
      d="$work/p$n"
      { declare -f crash
        # The leader's machine dies: its Patroni (which would restart PostgreSQL) and its
        # PostgreSQL, every process with kill -9. Then only wait: Patroni on the other node
        # promotes its synchronous standby once the leader key expires.
        echo "pkill -9 -f 'patroni $d/n1.yml'; crash '$d/n1'"
        echo "for _ in \$(seq 1 900); do curl -sf -o /dev/null http://127.0.0.1:$rb/primary && exit 0; sleep 0.1; done"
        echo "echo 'Patroni promoted nothing within 90 s' >&2; exit 1"
      } >"$work/fault$n.sh"
      fault_run "failover-patroni" 1 "$url" "bash $work/fault$n.sh"
      ;;
    *)
      echo "unknown run $run (outage, sync, async, sync-lag, async-lag, patroni)" >&2
      exit 2
      ;;
  esac
done
