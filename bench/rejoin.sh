#!/usr/bin/env bash
# The rejoin-latency benchmark (bench/rejoin.py) from nothing: builds this crate's verifiable
# consumer and the wire floor (release), builds the peers (bench/peers/build.sh: Java
# VerifiableConsumer from kafka-tools, librdkafka via confluent-kafka, franz-go, krafka), starts a
# Kafka broker of its own (tests/kafka/broker.sh, state in target/kafka-bench), creates the
# topics, runs every scenario for every client, prints the table and writes
# target/bench/rejoin.{json,md,png}. Extra arguments go to bench/rejoin.py, e.g.
#
#   bench/rejoin.sh                          # everything, 20 repetitions
#   bench/rejoin.sh --reps 5 --scenarios ab --clients floor,ours,java
set -euo pipefail

repo=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
state=$repo/target/kafka-bench

echo "rejoin.sh: building" >&2
cargo build --release --locked --example verifiable_consumer >&2
cargo bench --locked --bench wire_floor --no-run >&2 2>"$repo/target/wire-floor-build.log" || {
    cat "$repo/target/wire-floor-build.log" >&2
    exit 1
}
floor=$(cargo bench --locked --bench wire_floor --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "wire_floor" and m.get("executable"):
        print(m["executable"])')
bench/peers/build.sh >&2
peer_libs=$(tests/kafka/peer.sh libs --dir "$state" | tail -n 1)

bootstrap=$(tests/kafka/broker.sh start --dir "$state" | tail -n 1)
trap 'tests/kafka/broker.sh stop --dir "$state" >&2 || true' EXIT

topics=(bench-6:6 bench-12:12 bench-200:200)
for t in "${topics[@]}"; do
    java -cp "$peer_libs/*" -Dlog4j2.configurationFile="$repo/tests/kafka/log4j2.yaml" \
        org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create \
        --topic "${t%%:*}" --partitions "${t##*:}" --replication-factor 1 \
        >>"$repo/target/bench-topics.log" 2>&1 || {
        tail -n 20 "$repo/target/bench-topics.log" >&2
        exit 1
    }
done

"$repo/target/bench-peers/venv/bin/python" bench/rejoin.py --bootstrap "$bootstrap" \
    --peer-libs "$peer_libs" --wire-floor "$floor" \
    --topic6 bench-6 --topic12 bench-12 --topic-e bench-200 --partitions-e 200 "$@"
