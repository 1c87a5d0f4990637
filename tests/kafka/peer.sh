#!/usr/bin/env bash
# Jars of a real Java Kafka consumer for interop tests: Kafka's own system-test client
# org.apache.kafka.tools.VerifiableConsumer (kafka-tools, same version as the broker),
# fetched from Maven Central with the `peer` profile of tests/kafka/pom.xml. Used by
# tests/common/java_peer.rs.
#
#   peer.sh libs [--dir DIR]    make sure DIR/peer-libs holds the jars (fetched only when
#                               missing or when pom.xml changed); prints the directory as
#                               the LAST line of stdout, progress on stderr. Run a peer with
#                               java -cp "DIR/peer-libs/*" org.apache.kafka.tools.VerifiableConsumer
#
# State dir: --dir, else $KAFKA_IT_DIR, else <repo>/target/kafka-it (as broker.sh).
# Environment: MVN (default mvn), KAFKA_IT_DIR.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)
MVN=${MVN:-mvn}

log() { printf 'peer.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
since() { local d=$(($(now_ms) - $1)); printf '%d.%d' $((d / 1000)) $((d % 1000 / 100)); }

# Fetch the peer jars into $dir/peer-libs unless they are there for the current pom.xml.
# Concurrent callers (parallel test binaries) are serialised by a lock of their own, so
# that this never waits on (or holds) broker.sh's lock.
ensure_peer_libs() {
    local stamp t0 tmp out=$dir/peer-libs
    mkdir -p "$dir"
    exec 8>"$dir/.peer-lock"
    flock 8
    stamp=$(sha256sum "$here/pom.xml" | cut -d' ' -f1)
    if [[ -f $out/.pom-sha256 && $(<"$out/.pom-sha256") == "$stamp" ]]; then
        log "jars: cached in $out"
        return
    fi
    t0=$(now_ms)
    tmp=$dir/peer-libs.tmp
    rm -rf "$tmp"
    if ! "$MVN" -q -B -f "$here/pom.xml" -Ppeer dependency:copy-dependencies \
            -DincludeScope=runtime "-DoutputDirectory=$tmp" >"$dir/peer-mvn.log" 2>&1; then
        tail -n 40 "$dir/peer-mvn.log" >&2
        die "maven could not fetch the peer jars (full log: $dir/peer-mvn.log)"
    fi
    compgen -G "$tmp/kafka-tools-*.jar" >/dev/null || die "no kafka-tools jar in $tmp"
    echo "$stamp" >"$tmp/.pom-sha256"
    rm -rf "$out"
    mv "$tmp" "$out"
    local jars=("$out"/*.jar)
    log "jars: fetched ${#jars[@]} jars ($(du -sh "$out" | cut -f1)) in $(since "$t0") s"
}

(($#)) || usage
cmd=$1
shift
dir=${KAFKA_IT_DIR:-$repo/target/kafka-it}
while (($#)); do
    case $1 in
        --dir) dir=${2:?--dir needs a value}; shift 2 ;;
        --dir=*) dir=${1#*=}; shift ;;
        -h | --help) usage ;;
        *) die "unexpected argument $1" ;;
    esac
done
[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}

case $cmd in
    libs)
        ensure_peer_libs
        echo "$dir/peer-libs"
        ;;
    -h | --help | help) usage ;;
    *) die "unknown command '$cmd' (libs)" ;;
esac
