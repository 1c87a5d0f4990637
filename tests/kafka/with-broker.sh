#!/usr/bin/env bash
# Runs a command next to a fresh real Kafka broker: starts a single-node KRaft broker with
# broker.sh, exports its address as KAFKA_BOOTSTRAP, runs the command, and stops the broker
# (data removed) however the command ends. Exits with the command's status.
#
#   tests/kafka/with-broker.sh cargo test
#   tests/kafka/with-broker.sh cargo run --example consumer
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)
dir=${KAFKA_IT_DIR:-$repo/target/kafka-it}

[[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

stop() { "$here/broker.sh" stop --dir "$dir" >/dev/null 2>&1 || true; }
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

started=$(date +%s%N)
bootstrap=$("$here/broker.sh" start --dir "$dir" | tail -n 1)
echo "with-broker.sh: Kafka broker at $bootstrap (ready in $(( ($(date +%s%N) - started) / 1000000 )) ms)" >&2

status=0
KAFKA_BOOTSTRAP=$bootstrap "$@" || status=$?
exit "$status"
