// A real Java KafkaShareConsumer (KIP-932 share groups, kafka-clients 4.1 or later) as a test
// peer. Used by tests/common/share_peer.rs, which compiles this file against the jars of
// `tests/kafka/peer.sh libs` (kafka-tools and its kafka-clients) and runs it as a child JVM:
//
//   java -cp "<classes>:<peer.sh libs dir>/*" SharePeer --bootstrap-server B --group G --topic T
//       [--ack accept|release|reject|release-first] [--max-records N] [--explicit|--implicit]
//       [--bench N] [--property KEY=VALUE]...
//   java -cp ... SharePeer --offsets --bootstrap-server B --group G --topic T [--property K=V]...
//
// A KafkaShareConsumer with group.id G subscribed to T. --property sets a consumer property;
// the flags above override it for the keys they set (bootstrap.servers, group.id,
// share.acknowledgement.mode, the deserializers).
//
// --explicit (default): share.acknowledgement.mode=explicit. Every record is acknowledged with
//   consumer.acknowledge(record, TYPE) as --ack says: accept (default) ACCEPT, release RELEASE,
//   reject REJECT, release-first RELEASE on the first delivery (deliveryCount 1) and ACCEPT
//   on any later one. After each non-empty poll, commitSync().
// --implicit: share.acknowledgement.mode=implicit: the next poll (or close) accepts the
//   records of the one before. --ack must be accept (or absent).
// --max-records N: stop after N records: print and acknowledge the first N; in explicit mode
//   the rest of that batch is RELEASEd unprinted (so other members get it), in implicit mode
//   it is printed too (implicit acknowledgement cannot release), then close as below.
// --bench N: implicit mode, nothing printed per record; after N records (the whole batch in
//   which the N-th arrives) print the "bench" line and close as below.
// --offsets: no consumer. An Admin client (--property sets its properties) reads the share
//   group's start offsets, Admin.listShareGroupOffsets(Map.of(G, new ListShareGroupOffsetsSpec()))
//   .partitionsToOffsetInfo(G), for every partition of T (describeTopics), prints the "offsets"
//   line below and exits 0 (1 on an error, with the exception on stderr). The start offset of
//   a share partition is the first offset not yet in a terminal state (acknowledged ACCEPT or
//   REJECT, or archived) as the share coordinator last persisted it: on Kafka 4.4 one write
//   behind (a write persists the start offset from before the acknowledgement it carries), so
//   it does not reach the log end with the last acknowledgement. -1 for a partition the group
//   has no state for. The lag (computed by the broker: records up to the end of the log not
//   yet in a terminal state) is exact, 0 once all are; -1 when the broker gave none.
//
// stdout: one JSON object per line:
//   {"event":"started"}                                  after subscribe()
//   {"event":"record","partition":P,"offset":O,"value":"<UTF-8 value or null>",
//    "delivery_count":N,"ack":"ACCEPT|RELEASE|REJECT"}   every record (not with --bench)
//   {"event":"committed","count":K,"failed":F,"errors":[..]}
//                                                        explicit mode, after each commitSync:
//                                                        K acknowledgements sent, F of them in
//                                                        a partition whose result was an
//                                                        exception (listed in "errors")
//   {"event":"stats","records":N,"cpu_ns":C,"elapsed_ns":E}
//                                                        every second and once at exit: records
//                                                        so far, process CPU time, time since
//                                                        start
//   {"event":"bench","records":N,"elapsed_ns":E,"cpu_ns":C}
//                                                        --bench: from the first poll that
//                                                        returned records to the one that
//                                                        completed N (process CPU over the same)
//   {"event":"error","message":".."}                     an exception from poll / commitSync
//                                                        (the peer goes on polling)
//   {"event":"closed"}                                   after close(), then exit 0
//   {"event":"offsets","partitions":{"0":S,..},"lags":{"0":L,..}}
//                                                        --offsets: start offset S and lag L
//                                                        of every partition of T (-1: none)
// When stdin closes (EOF: the test closed it, or died), the consumer is woken up, close()d
// (which sends pending acknowledgements and leaves the group), and the peer exits 0.
//
// Exit status: 0 closed (--offsets: printed), 1 --offsets failed, 2 bad usage.

import java.io.IOException;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class SharePeer {
    static final long START = System.nanoTime();
    static final AtomicLong RECORDS = new AtomicLong();
    static volatile boolean stopping = false;

    enum Ack { ACCEPT, RELEASE, REJECT, RELEASE_FIRST }

    public static void main(String[] args) throws Exception {
        String bootstrap = null, group = null, topic = null;
        Ack ack = Ack.ACCEPT;
        boolean ackGiven = false, explicit = true, offsets = false;
        long maxRecords = -1, bench = -1;
        Properties props = new Properties();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--explicit" -> explicit = true;
                case "--implicit" -> explicit = false;
                case "--offsets" -> offsets = true;
                case "--bootstrap-server" -> bootstrap = value(args, ++i, a);
                case "--group" -> group = value(args, ++i, a);
                case "--topic" -> topic = value(args, ++i, a);
                case "--max-records" -> maxRecords = count(value(args, ++i, a), a);
                case "--bench" -> bench = count(value(args, ++i, a), a);
                case "--ack" -> {
                    String v = value(args, ++i, a);
                    ackGiven = true;
                    try {
                        ack = Ack.valueOf(v.toUpperCase().replace('-', '_'));
                    } catch (IllegalArgumentException e) {
                        usage("--ack accept|release|reject|release-first, not " + v);
                    }
                }
                case "--property" -> {
                    String kv = value(args, ++i, a);
                    int eq = kv.indexOf('=');
                    if (eq <= 0) usage("--property KEY=VALUE, not " + kv);
                    props.put(kv.substring(0, eq), kv.substring(eq + 1));
                }
                default -> usage("unexpected argument " + a);
            }
        }
        if (bootstrap == null || group == null || topic == null) {
            usage("--bootstrap-server, --group and --topic are required");
        }
        if (offsets) {
            offsets(bootstrap, group, topic, props);
            return;
        }
        if (bench >= 0) explicit = false;
        if (!explicit && ackGiven && ack != Ack.ACCEPT) {
            usage("implicit acknowledgement (--implicit, --bench) accepts: no --ack " + ack);
        }
        if (bench >= 0) maxRecords = bench;

        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, explicit ? "explicit" : "implicit");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props);

        Thread stdinWatch = new Thread(() -> {
            try {
                System.in.transferTo(OutputStream.nullOutputStream());
            } catch (IOException ignored) {
                // as EOF
            }
            stopping = true;
            consumer.wakeup();
        }, "stdin-watch");
        stdinWatch.setDaemon(true);
        stdinWatch.start();

        Thread stats = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(1000);
                } catch (InterruptedException e) {
                    return;
                }
                emitStats();
            }
        }, "stats");
        stats.setDaemon(true);
        stats.start();

        consumer.subscribe(List.of(topic));
        emit("{\"event\":\"started\"}");

        long firstAt = 0, firstCpu = 0;
        while (!stopping) {
            ConsumerRecords<byte[], byte[]> batch;
            try {
                batch = consumer.poll(Duration.ofMillis(500));
            } catch (WakeupException e) {
                break;
            } catch (KafkaException e) {
                emitError(e);
                Thread.sleep(100);
                continue;
            }
            if (batch.isEmpty()) continue;
            if (firstAt == 0) {
                firstAt = System.nanoTime();
                firstCpu = cpuNanos();
            }
            Map<String, Integer> acked = new HashMap<>();
            int sent = 0;
            for (ConsumerRecord<byte[], byte[]> r : batch) {
                boolean over = maxRecords >= 0 && RECORDS.get() >= maxRecords;
                short delivery = r.deliveryCount().orElse((short) 0);
                AcknowledgeType type = switch (ack) {
                    case ACCEPT -> AcknowledgeType.ACCEPT;
                    case RELEASE -> AcknowledgeType.RELEASE;
                    case REJECT -> AcknowledgeType.REJECT;
                    case RELEASE_FIRST -> delivery <= 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                };
                if (explicit) {
                    if (over) type = AcknowledgeType.RELEASE;
                    consumer.acknowledge(r, type);
                    acked.merge(r.topic() + ":" + r.partition(), 1, Integer::sum);
                    sent++;
                    if (over) continue;
                }
                RECORDS.incrementAndGet();
                if (bench < 0) {
                    emit("{\"event\":\"record\",\"partition\":" + r.partition()
                        + ",\"offset\":" + r.offset()
                        + ",\"value\":" + json(r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8))
                        + ",\"delivery_count\":" + r.deliveryCount().map(String::valueOf).orElse("null")
                        + ",\"ack\":\"" + type.name() + "\"}");
                }
            }
            if (explicit && sent > 0) commit(consumer, acked, sent);
            if (maxRecords >= 0 && RECORDS.get() >= maxRecords) {
                if (bench >= 0) {
                    emit("{\"event\":\"bench\",\"records\":" + RECORDS.get()
                        + ",\"elapsed_ns\":" + (System.nanoTime() - firstAt)
                        + ",\"cpu_ns\":" + (cpuNanos() - firstCpu) + "}");
                }
                break;
            }
        }
        emitStats();
        // A wakeup() that came after the last poll would throw from the next blocking call.
        try {
            consumer.close(Duration.ofSeconds(30));
        } catch (WakeupException e) {
            consumer.close(Duration.ofSeconds(30));
        }
        emit("{\"event\":\"closed\"}");
        System.exit(0);
    }

    /// --offsets: prints the start offset and lag of every partition of `topic` in share group
    /// `group`, then exits 0; exits 1 with the exception on stderr if the Admin calls fail.
    static void offsets(String bootstrap, String group, String topic, Properties props) {
        Properties config = new Properties();
        config.putAll(props);
        config.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        Map<Integer, Long> starts = new TreeMap<>(), lags = new TreeMap<>();
        try (Admin admin = Admin.create(config)) {
            int partitions = admin.describeTopics(List.of(topic)).allTopicNames()
                .get(40, TimeUnit.SECONDS).get(topic).partitions().size();
            for (int p = 0; p < partitions; p++) {
                starts.put(p, -1L);
                lags.put(p, -1L);
            }
            Map<TopicPartition, SharePartitionOffsetInfo> info = admin
                .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                .partitionsToOffsetInfo(group)
                .get(40, TimeUnit.SECONDS);
            for (var e : info.entrySet()) {
                if (!e.getKey().topic().equals(topic)) continue;
                SharePartitionOffsetInfo o = e.getValue();
                starts.put(e.getKey().partition(), o == null ? -1L : o.startOffset());
                lags.put(e.getKey().partition(), o == null ? -1L : o.lag().orElse(-1L));
            }
        } catch (Exception e) {
            e.printStackTrace();
            System.err.flush();
            System.exit(1);
        }
        emit("{\"event\":\"offsets\",\"partitions\":" + jsonMap(starts) + ",\"lags\":" + jsonMap(lags) + "}");
        System.exit(0);
    }

    static String jsonMap(Map<Integer, Long> m) {
        List<String> entries = new ArrayList<>();
        for (var e : m.entrySet()) entries.add("\"" + e.getKey() + "\":" + e.getValue());
        return "{" + String.join(",", entries) + "}";
    }

    /// commitSync() the acknowledgements of one batch (`acked`: count per "topic:partition");
    /// prints how many were sent and how many fell in a partition that failed.
    static void commit(KafkaShareConsumer<byte[], byte[]> consumer, Map<String, Integer> acked, int sent) {
        Map<TopicIdPartition, Optional<KafkaException>> result;
        try {
            result = consumer.commitSync();
        } catch (WakeupException e) {
            // close() sends them.
            stopping = true;
            return;
        } catch (KafkaException e) {
            emitError(e);
            return;
        }
        int failed = 0;
        List<String> errors = new ArrayList<>();
        for (var e : result.entrySet()) {
            if (e.getValue().isEmpty()) continue;
            TopicIdPartition tp = e.getKey();
            failed += acked.getOrDefault(tp.topic() + ":" + tp.partition(), 0);
            errors.add(json(tp.topic() + "-" + tp.partition() + ": " + e.getValue().get()));
        }
        emit("{\"event\":\"committed\",\"count\":" + sent + ",\"failed\":" + failed
            + ",\"errors\":[" + String.join(",", errors) + "]}");
    }

    static long cpuNanos() {
        var os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean sun) {
            long t = sun.getProcessCpuTime();
            if (t >= 0) return t;
        }
        // Fallback: the threads still alive (misses finished ones).
        var threads = ManagementFactory.getThreadMXBean();
        long total = 0;
        for (long id : threads.getAllThreadIds()) total += Math.max(0, threads.getThreadCpuTime(id));
        return total;
    }

    static void emitStats() {
        emit("{\"event\":\"stats\",\"records\":" + RECORDS.get() + ",\"cpu_ns\":" + cpuNanos()
            + ",\"elapsed_ns\":" + (System.nanoTime() - START) + "}");
    }

    static void emitError(Exception e) {
        emit("{\"event\":\"error\",\"message\":" + json(String.valueOf(e)) + "}");
    }

    /// One stdout line, whole (the main, stats and stdin-watch threads all print).
    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String value(String[] args, int i, String flag) {
        if (i >= args.length) usage(flag + " needs a value");
        return args[i];
    }

    static long count(String v, String flag) {
        try {
            long n = Long.parseLong(v);
            if (n >= 0) return n;
        } catch (NumberFormatException ignored) { }
        usage(flag + " needs a count, not " + v);
        return -1;
    }

    static void usage(String why) {
        System.err.println("SharePeer: " + why + " (see the head of SharePeer.java)");
        System.exit(2);
    }

    /// A JSON string (or null).
    static String json(String x) {
        if (x == null) return "null";
        StringBuilder out = new StringBuilder(x.length() + 2).append('"');
        for (int i = 0; i < x.length(); i++) {
            char c = x.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
