#!/usr/bin/env bash
# Jars of a real Java Kafka consumer for interop tests: Kafka's own system-test client
# org.apache.kafka.tools.VerifiableConsumer (kafka-tools with its kafka-clients), fetched
# from Maven Central with the `peer` profile of tests/kafka/pom.xml (4.x) or
# tests/kafka/pom-3x.xml (3.x). Used by tests/common/java_peer.rs. Also the jars of a Java
# Kafka Streams application (tests/kafka/pom-streams.xml), for tests/common/streams_peer.rs.
#
#   peer.sh libs [--dir DIR] [--version X.Y.Z]
#                               make sure the jars of that Kafka release are cached (fetched
#                               only when missing or when their pom changed); prints their
#                               directory as the LAST line of stdout, progress on stderr. Run
#                               a peer with
#                               java -cp "<that dir>/*" org.apache.kafka.tools.VerifiableConsumer
#   peer.sh streams-libs [--dir DIR] [--version X.Y.Z]
#                               the same for kafka-streams (4.2 or later: streams groups are GA
#                               there; static streams members need 4.4). Run the application
#                               with java -cp "<that dir>/*" tests/kafka/StreamsPeer.java run ..
#
# --version: the kafka-tools / kafka-clients release, else $KAFKA_VERSION (what
# with-broker.sh exports: the broker's release), else 4.4.0. Any release from 3.6 on.
# Jar dirs: the default release in DIR/peer-libs (as before releases could be chosen);
# others shared by all state dirs in <repo>/target/java-peer-libs/<version>/. Streams jars:
# DIR/streams-peer-libs for the default release, else <repo>/target/streams-peer-libs/<version>/.
#
# State dir: --dir, else $KAFKA_IT_DIR, else <repo>/target/kafka-it (as broker.sh).
# Environment: MVN (default mvn), KAFKA_IT_DIR, KAFKA_VERSION.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)
MVN=${MVN:-mvn}

# The release without --version / KAFKA_VERSION: pom.xml's kafka.version (as broker.sh).
DEFAULT_VERSION=4.4.0

log() { printf 'peer.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
since() { local d=$(($(now_ms) - $1)); printf '%d.%d' $((d / 1000)) $((d % 1000 / 100)); }

# Sets, for $version: the pom ($pom), the jar dir ($out), its lock file ($lock), the Maven
# log ($mvn_log) and the cache stamp ($stamp).
peer_settings() {
    [[ $version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || die "--version must be X.Y.Z, not '$version'"
    local vline=$((BASH_REMATCH[1] * 100 + BASH_REMATCH[2]))
    ((vline >= 306)) || die "Kafka $version: releases before 3.6 are not supported"
    if [[ $version == "$DEFAULT_VERSION" ]]; then
        # As before releases could be chosen: per state dir, stamped with pom.xml's hash.
        pom=$here/pom.xml
        grep -q "<kafka.version>$DEFAULT_VERSION</kafka.version>" "$pom" \
            || die "DEFAULT_VERSION $DEFAULT_VERSION is not the kafka.version of $pom"
        out=$dir/peer-libs
        lock=$dir/.peer-lock
        mvn_log=$dir/peer-mvn.log
        stamp=$(sha256sum "$pom" | cut -d' ' -f1)
    else
        if ((vline < 400)); then pom=$here/pom-3x.xml; else pom=$here/pom.xml; fi
        out=$repo/target/java-peer-libs/$version
        lock=$out.lock
        mvn_log=$out.mvn.log
        stamp=$( { cat "$pom"; echo "kafka.version=$version"; } | sha256sum | cut -d' ' -f1)
    fi
    profile=(-Ppeer)
    main_jar=kafka-tools-$version.jar
}

# The same for the Kafka Streams jars (pom-streams.xml): always stamped with the pom and the
# version, so that a change to either refetches.
streams_settings() {
    [[ $version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || die "--version must be X.Y.Z, not '$version'"
    local vline=$((BASH_REMATCH[1] * 100 + BASH_REMATCH[2]))
    ((vline >= 402)) || die "Kafka $version: the streams peer needs 4.2 or later (streams groups GA)"
    pom=$here/pom-streams.xml
    if [[ $version == "$DEFAULT_VERSION" ]]; then
        out=$dir/streams-peer-libs
        lock=$dir/.streams-peer-lock
        mvn_log=$dir/streams-peer-mvn.log
    else
        out=$repo/target/streams-peer-libs/$version
        lock=$out.lock
        mvn_log=$out.mvn.log
    fi
    stamp=$( { cat "$pom"; echo "kafka.version=$version"; } | sha256sum | cut -d' ' -f1)
    profile=()
    main_jar=kafka-streams-$version.jar
}

# Fetch the peer jars of $version into $out unless they are there for the current pom.
# Concurrent callers (parallel test binaries) are serialised by a lock of their own, so
# that this never waits on (or holds) broker.sh's lock.
ensure_peer_libs() {
    local t0 tmp
    mkdir -p "$dir" "${out%/*}"
    exec 8>"$lock"
    flock 8
    if [[ -f $out/.pom-sha256 && $(<"$out/.pom-sha256") == "$stamp" ]]; then
        log "jars: Kafka $version cached in $out"
        return
    fi
    t0=$(now_ms)
    tmp=$out.tmp
    rm -rf "$tmp"
    if ! "$MVN" -q -B -f "$pom" "${profile[@]}" dependency:copy-dependencies -DincludeScope=runtime \
            "-Dkafka.version=$version" "-DoutputDirectory=$tmp" >"$mvn_log" 2>&1; then
        tail -n 40 "$mvn_log" >&2
        die "maven could not fetch the Kafka $version peer jars (full log: $mvn_log)"
    fi
    compgen -G "$tmp/$main_jar" >/dev/null || die "no $main_jar in $tmp"
    echo "$stamp" >"$tmp/.pom-sha256"
    rm -rf "$out"
    mv "$tmp" "$out"
    local jars=("$out"/*.jar)
    log "jars: fetched ${#jars[@]} jars of Kafka $version ($(du -sh "$out" | cut -f1)) in $(since "$t0") s"
}

(($#)) || usage
cmd=$1
shift
dir=${KAFKA_IT_DIR:-$repo/target/kafka-it}
version=${KAFKA_VERSION:-}
while (($#)); do
    case $1 in
        --dir) dir=${2:?--dir needs a value}; shift 2 ;;
        --dir=*) dir=${1#*=}; shift ;;
        --version) version=${2:?--version needs a value}; shift 2 ;;
        --version=*) version=${1#*=}; shift ;;
        -h | --help) usage ;;
        *) die "unexpected argument $1" ;;
    esac
done
[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}
version=${version:-$DEFAULT_VERSION}

case $cmd in
    libs)
        peer_settings
        ensure_peer_libs
        echo "$out"
        ;;
    streams-libs)
        streams_settings
        ensure_peer_libs
        echo "$out"
        ;;
    -h | --help | help) usage ;;
    *) die "unknown command '$cmd' (libs, streams-libs)" ;;
esac
