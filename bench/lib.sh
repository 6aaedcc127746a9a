# bench/lib.sh: process control shared by the bench scripts that start servers themselves
# (bench/disk/run.sh, bench/disk/restart.sh, bench/large/run.sh). Source it after setting
# LOG_TAG (the prefix of progress lines) and RUN (the run's directory, removed at exit unless
# KEEP=1). Every server is started in its own process group pinned to CPU 1 (MEASURING.md:
# load generators on CPU 0) and stopped by that group's id on exit, whatever the exit.
PGIDS=()
log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
cleanup() {
    for g in "${PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
    sleep 0.5
    for g in "${PGIDS[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
    [ "${KEEP:-0}" = 1 ] || rm -rf "$RUN"
}
trap cleanup EXIT
start() { # name cmd...: in its own process group on CPU 1, output in $RUN/name.out
    local name=$1
    shift
    setsid taskset -c 1 "$@" >"$RUN/$name.out" 2>&1 &
    PGIDS+=($!)
}
wait_port() { # port [seconds, default 30]: until 127.0.0.1:port accepts, or exit showing the servers' output
    local tries=$(( ${2:-30} * 20 ))
    for _ in $(seq 1 "$tries"); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    log "port $1 never opened"
    for f in "$RUN"/*.out; do [ -e "$f" ] && { echo "== $f" >&2; tail -n 5 "$f" >&2; }; done
    exit 1
}
