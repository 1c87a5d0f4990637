#!/usr/bin/env bash
# Builds the benchmark peers (other Kafka clients behind the command line / stdout JSON of
# Kafka's org.apache.kafka.tools.VerifiableConsumer, plus --members N) into
# <repo>/target/bench-peers/. Idempotent: a second run only re-checks (go and cargo rebuild
# nothing, pip installs nothing, javac runs only when the source is newer).
#
#   bench/peers/build.sh        progress on stderr; the LAST lines of stdout are KEY=VALUE,
#                               each VALUE the path of a launcher script (below)
#
# What it makes (all under target/bench-peers/):
#   venv/                       Python venv: confluent-kafka (librdkafka) and matplotlib, pinned
#   franz-go-verifiable-consumer   go build of bench/peers/franz-go (franz-go v1.22.3)
#   krafka-target/release/krafka-verifiable-consumer
#                               cargo build --release of bench/peers/krafka (krafka 0.28.1,
#                               its own workspace, --locked)
#   java/MultiConsumer.class    javac of bench/peers/java/MultiConsumer.java against the
#                               kafka-clients 4.4 jars of `tests/kafka/peer.sh libs --dir
#                               target/kafka-bench`
#   bin/                        one launcher per peer (exec, so the peer keeps the launcher's
#                               pid and gets its signals):
#     bin/java-verifiable-consumer     Kafka's own VerifiableConsumer (single member)
#     bin/java-multi-consumer          MultiConsumer (--members N)
#     bin/rdkafka-verifiable-consumer  bench/peers/rdkafka/verifiable_consumer.py
#     bin/franz-go-verifiable-consumer
#     bin/krafka-verifiable-consumer
#   The Java launchers pass $JAVA_OPTS (unset: none) and send log4j output to stderr
#   (bench/peers/java/log4j2.properties).
#
# Run a peer (every one takes the same flags):
#   target/bench-peers/bin/<peer> --bootstrap-server 127.0.0.1:PORT --topic t --group-id g \
#       [--group-protocol classic|consumer] [--group-instance-id ID] [--session-timeout MS] \
#       [--consumer.config FILE] [--members N]      (--members: not java-verifiable-consumer)
# or without the launchers:
#   java -cp "LIBS/*" org.apache.kafka.tools.VerifiableConsumer ...
#   java -cp "target/bench-peers/java:LIBS/*" MultiConsumer ... --members N
#   target/bench-peers/venv/bin/python bench/peers/rdkafka/verifiable_consumer.py ...
#   target/bench-peers/franz-go-verifiable-consumer ...
#   target/bench-peers/krafka-target/release/krafka-verifiable-consumer ...
# (LIBS: the last stdout line of `tests/kafka/peer.sh libs --dir target/kafka-bench`.)
# bench/peers/check_peers.py runs all of them against a broker (see its header).
#
# Needs: python3 (>= 3.10, with venv), go (>= 1.26, as franz-go v1.22.3 requires), cargo /
# rustc (>= 1.95, krafka's rust-version), a JDK (javac), mvn (for peer.sh). Environment:
# PYTHON (default python3), GO (default go), CARGO (default cargo), JAVAC (default javac).
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)
out=$repo/target/bench-peers
PYTHON=${PYTHON:-python3}
GO=${GO:-go}
CARGO=${CARGO:-cargo}
JAVAC=${JAVAC:-javac}

CONFLUENT_KAFKA_VERSION=2.16.1
MATPLOTLIB_VERSION=3.11.2

log() { printf 'build.sh: %s\n' "$*" >&2; }
mkdir -p "$out/bin"

# ---------------------------------------------------------------------------- python
venv=$out/venv
if [[ ! -x $venv/bin/python ]]; then
    log "venv: creating $venv"
    "$PYTHON" -m venv "$venv"
fi
want="confluent-kafka==$CONFLUENT_KAFKA_VERSION matplotlib==$MATPLOTLIB_VERSION"
have=$("$venv/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null || true)
missing=()
for req in $want; do
    grep -qix -- "$req" <<<"$have" || missing+=("$req")
done
if ((${#missing[@]})); then
    log "venv: installing ${missing[*]}"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${missing[@]}" >&2
else
    log "venv: $want already installed"
fi

# ---------------------------------------------------------------------------- franz-go
log "franz-go: go build"
(cd "$here/franz-go" && "$GO" build -mod=readonly -trimpath \
    -o "$out/franz-go-verifiable-consumer" .) >&2

# ---------------------------------------------------------------------------- krafka
log "krafka: cargo build --release (first build: a few minutes)"
CARGO_TARGET_DIR=$out/krafka-target "$CARGO" build --release --locked \
    --manifest-path "$here/krafka/Cargo.toml" >&2

# ---------------------------------------------------------------------------- java
libs=$("$repo/tests/kafka/peer.sh" libs --dir "$repo/target/kafka-bench" | tail -n 1)
[[ -d $libs ]] || { log "error: peer.sh printed no jar directory"; exit 1; }
class=$out/java/MultiConsumer.class
if [[ ! -f $class || $here/java/MultiConsumer.java -nt $class ]]; then
    log "java: javac MultiConsumer"
    mkdir -p "$out/java"
    # -XDignore.symbol.file: no warning per sun.misc.Signal use (SIGTERM -> exit 0)
    "$JAVAC" -XDignore.symbol.file -nowarn -cp "$libs/*" -d "$out/java" \
        "$here/java/MultiConsumer.java" >&2
else
    log "java: MultiConsumer.class up to date"
fi

# ---------------------------------------------------------------------------- launchers
# write_launcher NAME COMMAND...: $out/bin/NAME execs COMMAND "$@" (rewritten only on change).
write_launcher() {
    local name=$1 f=$out/bin/$1 tmp
    shift
    tmp=$(mktemp "$out/bin/.$name.XXXXXX")
    {
        echo '#!/usr/bin/env bash'
        echo "# Generated by bench/peers/build.sh."
        printf 'exec'
        printf ' %s' "$@"
        printf ' "$@"\n'
    } >"$tmp"
    chmod 755 "$tmp"
    if cmp -s "$tmp" "$f"; then rm -f "$tmp"; else mv "$tmp" "$f"; fi
}
log4j="-Dlog4j2.configurationFile=$here/java/log4j2.properties"
write_launcher java-verifiable-consumer 'java ${JAVA_OPTS:-}' "$log4j" \
    "-cp '$libs/*'" org.apache.kafka.tools.VerifiableConsumer
write_launcher java-multi-consumer 'java ${JAVA_OPTS:-}' "$log4j" \
    "-cp '$out/java:$libs/*'" MultiConsumer
write_launcher rdkafka-verifiable-consumer "'$venv/bin/python'" "'$here/rdkafka/verifiable_consumer.py'"
write_launcher franz-go-verifiable-consumer "'$out/franz-go-verifiable-consumer'"
write_launcher krafka-verifiable-consumer "'$out/krafka-target/release/krafka-verifiable-consumer'"

log "done"
echo "PEER_LIBS=$libs"
echo "PEER_JAVA=$out/bin/java-verifiable-consumer"
echo "PEER_JAVA_MULTI=$out/bin/java-multi-consumer"
echo "PEER_RDKAFKA=$out/bin/rdkafka-verifiable-consumer"
echo "PEER_FRANZ_GO=$out/bin/franz-go-verifiable-consumer"
echo "PEER_KRAFKA=$out/bin/krafka-verifiable-consumer"
