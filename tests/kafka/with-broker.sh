#!/usr/bin/env bash
# Runs a command next to a fresh real Kafka broker: starts a single-node KRaft broker with
# broker.sh, exports its address as KAFKA_BOOTSTRAP, runs the command, and stops the broker
# (data removed) however the command ends. Exits with the command's status.
#
# It also exports KAFKA_BROKER_TESTS=1, from which build.rs sets `--cfg kafka_broker`: the
# real-broker tests run (elsewhere they are reported ignored) and fail without a broker.
#
# KAFKA_VERSION picks the Kafka release (broker.sh start --version; default 4.4.0); it is
# exported to the command as the version that runs, for version-aware tests
# (tests/compat.rs).
#
# Also exported, from the broker's security.env (see broker.sh): the SASL_SSL and
# SASL_PLAINTEXT listeners (KAFKA_SASL_SSL_BOOTSTRAP, KAFKA_SASL_PLAINTEXT_BOOTSTRAP),
# the test CA, a CA that did not sign the broker, a client certificate and key
# (KAFKA_TLS_CA, KAFKA_TLS_UNTRUSTED_CA, KAFKA_TLS_CLIENT_CERT, KAFKA_TLS_CLIENT_KEY) and
# the SASL user (KAFKA_SASL_USER, KAFKA_SASL_PASSWORD).
#
#   tests/kafka/with-broker.sh cargo test
#   tests/kafka/with-broker.sh cargo run --example consumer
#   KAFKA_VERSION=3.6.2 tests/kafka/with-broker.sh cargo test --test compat
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)
dir=${KAFKA_IT_DIR:-$repo/target/kafka-it}

[[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

# shellcheck disable=SC2317 # only called through the EXIT trap
stop() { "$here/broker.sh" stop --dir "$dir" >/dev/null 2>&1 || true; }
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

started=$(date +%s%N)
version_args=()
[[ -z ${KAFKA_VERSION:-} ]] || version_args=(--version "$KAFKA_VERSION")
bootstrap=$("$here/broker.sh" start --dir "$dir" "${version_args[@]}" | tail -n 1)
KAFKA_VERSION=$("$here/broker.sh" version --dir "$dir")
[[ -s $dir/security.env ]] || { echo "with-broker.sh: broker.sh wrote no $dir/security.env" >&2; exit 1; }
set -a
# shellcheck source=/dev/null # written by broker.sh start
. "$dir/security.env"
set +a
echo "with-broker.sh: Kafka $KAFKA_VERSION broker at $bootstrap, SASL_SSL $KAFKA_SASL_SSL_BOOTSTRAP," \
    "SASL_PLAINTEXT $KAFKA_SASL_PLAINTEXT_BOOTSTRAP (ready in $(( ($(date +%s%N) - started) / 1000000 )) ms)" >&2

status=0
KAFKA_BOOTSTRAP=$bootstrap KAFKA_VERSION=$KAFKA_VERSION KAFKA_BROKER_TESTS=1 "$@" || status=$?
exit "$status"
