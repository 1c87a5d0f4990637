#!/usr/bin/env bash
# Runs a command beside N busy loops (default: one per core), to see a test under CPU load,
# and stops the loops however the command ends. Exits with the command's status.
#
#   tests/kafka/load.sh [-n N] COMMAND [ARGS...]
#   tests/kafka/load.sh tests/kafka/with-broker.sh cargo test --all-features --test lease_broker
set -euo pipefail

n=$(nproc)
if [[ ${1:-} == -n ]]; then
    n=${2:?-n needs a count}
    shift 2
fi
[[ $n =~ ^[0-9]+$ ]] || { echo "load.sh: -n takes a count, not '$n'" >&2; exit 2; }
[[ $# -gt 0 ]] || { echo "usage: $0 [-n N] COMMAND [ARGS...]" >&2; exit 2; }

pids=()
# shellcheck disable=SC2317 # only called through the EXIT trap
stop() {
    ((${#pids[@]} == 0)) && return
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for ((i = 0; i < n; i++)); do
    (while :; do :; done) &
    pids+=("$!")
done
echo "load.sh: $n busy loop(s) (pids ${pids[*]})" >&2

status=0
"$@" || status=$?
exit "$status"
