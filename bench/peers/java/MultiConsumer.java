/*
 * VerifiableConsumer-style benchmark peer on the Java KafkaConsumer (kafka-clients 4.4), for
 * the multi-member mode: N members of one group in one JVM, one KafkaConsumer and one poll
 * thread each. Single-member Java runs use Kafka's own
 * org.apache.kafka.tools.VerifiableConsumer instead.
 *
 *   javac -cp "PEER_LIBS/*" -d target/bench-peers/java bench/peers/java/MultiConsumer.java
 *   java -Dlog4j2.configurationFile=bench/peers/java/log4j2.properties \
 *       -cp "target/bench-peers/java:PEER_LIBS/*" MultiConsumer \
 *       --bootstrap-server 127.0.0.1:9092 --topic t --group-id g --members 3 \
 *       [--group-protocol classic|consumer] [--group-instance-id ID] [--session-timeout MS] \
 *       [--consumer.config FILE]
 *
 * PEER_LIBS is the directory printed by `tests/kafka/peer.sh libs --dir DIR`.
 *
 * Flags: as VerifiableConsumer's (--bootstrap-server, --topic, --group-id required;
 * --group-protocol default classic; --group-instance-id: static membership, with --members
 * N > 1 member i uses "ID-i"; --session-timeout: classic only, rejected by the client with
 * the consumer protocol; --group-remote-assignor: consumer protocol only;
 * --consumer.config / --command-config: a .properties file passed through as consumer
 * configuration, the command line wins; --reset-policy) plus --members N (default 1).
 * --max-messages, --verbose, --enable-autocommit, --close-timeout and --assignment-strategy
 * are accepted and ignored: records are polled and dropped, auto commit stays off.
 *
 * Events, one JSON object per line, flushed, "timestamp" in ms since the epoch, "member": i
 * on the per-member lines when N > 1: startup_complete (once, after every consumer is
 * created and subscribed, right before the first poll), partitions_assigned /
 * partitions_revoked (ConsumerRebalanceListener; lost partitions are reported as revoked,
 * the listener's default onPartitionsLost), shutdown_requested, shutdown_complete (after
 * every consumer closed with KafkaConsumer.close()'s default leave semantics). SIGTERM /
 * SIGINT: every consumer is closed, then the JVM exits 0. log4j2.properties beside this
 * file sends the client's logging (WARN and up) to stderr.
 */

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.time.Duration;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class MultiConsumer {
    private static final Object OUT = new Object();

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }

    /** Prints one event line; member < 0 leaves out "member", partitions null leaves out "partitions". */
    static void emit(String name, int member, Collection<TopicPartition> partitions) {
        StringBuilder b = new StringBuilder();
        b.append("{\"timestamp\":").append(System.currentTimeMillis())
            .append(",\"name\":").append(quote(name));
        if (member >= 0) b.append(",\"member\":").append(member);
        if (partitions != null) {
            b.append(",\"partitions\":[");
            boolean first = true;
            for (TopicPartition tp : partitions) {
                if (!first) b.append(',');
                first = false;
                b.append("{\"topic\":").append(quote(tp.topic()))
                    .append(",\"partition\":").append(tp.partition()).append('}');
            }
            b.append(']');
        }
        b.append('}');
        synchronized (OUT) {
            System.out.println(b);
            System.out.flush();
        }
    }

    private static void die(String msg) {
        System.err.println("MultiConsumer: error: " + msg);
        System.exit(1);
    }

    private static final List<String> VALUED = List.of("--bootstrap-server", "--topic", "--group-id",
        "--group-protocol", "--group-instance-id", "--session-timeout", "--consumer.config",
        "--command-config", "--members", "--max-messages", "--reset-policy", "--close-timeout",
        "--assignment-strategy", "--group-remote-assignor");

    private static Map<String, String> parseArgs(String[] argv) {
        Map<String, String> values = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String arg = argv[i];
            String flag = arg;
            String value = null;
            int eq = arg.indexOf('=');
            if (arg.startsWith("--") && eq > 0) {
                flag = arg.substring(0, eq);
                value = arg.substring(eq + 1);
            }
            if (flag.equals("-h") || flag.equals("--help")) {
                System.out.println("see the header of bench/peers/java/MultiConsumer.java");
                System.exit(0);
            } else if (flag.equals("--verbose") || flag.equals("--enable-autocommit")) {
                values.put(flag, "true");
            } else if (VALUED.contains(flag)) {
                if (value == null) {
                    if (i + 1 >= argv.length) die("argument " + flag + ": expected one argument");
                    value = argv[++i];
                }
                values.put(flag, value);
            } else {
                die("unrecognized argument '" + arg + "'");
            }
        }
        for (String req : List.of("--bootstrap-server", "--topic", "--group-id")) {
            if (!values.containsKey(req)) die("argument " + req + " is required");
        }
        return values;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parseArgs(argv);
        String protocol = args.getOrDefault("--group-protocol", "classic").toLowerCase(Locale.ROOT);
        if (!protocol.equals("classic") && !protocol.equals("consumer")) {
            die("argument --group-protocol: '" + protocol + "' is not one of classic, consumer");
        }
        int members = 1;
        try {
            members = Integer.parseInt(args.getOrDefault("--members", "1"));
        } catch (NumberFormatException e) {
            die("argument --members: not an integer");
        }
        if (members < 1) die("argument --members: must be at least 1");

        Properties base = new Properties();
        for (String key : List.of("--consumer.config", "--command-config")) {
            String path = args.get(key);
            if (path == null) continue;
            try (InputStream in = new FileInputStream(path)) {
                base.load(in);
            } catch (IOException e) {
                die("cannot read " + path + ": " + e.getMessage());
            }
        }
        base.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("--bootstrap-server"));
        base.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("--group-id"));
        base.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        base.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        base.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG,
            args.getOrDefault("--reset-policy", "earliest").toLowerCase(Locale.ROOT));
        base.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        base.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (args.containsKey("--session-timeout")) {
            base.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, args.get("--session-timeout"));
        }
        if (args.containsKey("--group-remote-assignor")) {
            base.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, args.get("--group-remote-assignor"));
        }
        String instanceId = args.get("--group-instance-id");
        String topic = args.get("--topic");

        List<KafkaConsumer<byte[], byte[]>> consumers = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            Properties props = new Properties();
            props.putAll(base);
            if (instanceId != null) {
                props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG,
                    members == 1 ? instanceId : instanceId + "-" + i);
            }
            KafkaConsumer<byte[], byte[]> consumer;
            try {
                consumer = new KafkaConsumer<>(props);
            } catch (Exception e) {
                die("configuration: " + e.getMessage());
                return;
            }
            final int tag = members > 1 ? i : -1;
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    emit("partitions_assigned", tag, partitions);
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    emit("partitions_revoked", tag, partitions);
                }
            });
            consumers.add(consumer);
        }

        CountDownLatch closed = new CountDownLatch(members);
        List<Thread> threads = new ArrayList<>();
        for (KafkaConsumer<byte[], byte[]> consumer : consumers) {
            Thread t = new Thread(() -> {
                try {
                    while (true) consumer.poll(Duration.ofMillis(Long.MAX_VALUE));
                } catch (WakeupException e) {
                    // shutdown
                } catch (Exception e) {
                    System.err.println("MultiConsumer: poll: " + e);
                } finally {
                    try {
                        consumer.close();
                    } catch (Exception e) {
                        System.err.println("MultiConsumer: close: " + e);
                    }
                    closed.countDown();
                }
            }, "member-" + threads.size());
            threads.add(t);
        }

        // SIGTERM / SIGINT: wake every poll; each thread closes its consumer, then main prints
        // shutdown_complete and exits 0 (a JVM shutdown hook would exit 143 / 130).
        sun.misc.SignalHandler onSignal = sig -> {
            emit("shutdown_requested", -1, null);
            for (KafkaConsumer<byte[], byte[]> c : consumers) c.wakeup();
        };
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), onSignal);
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), onSignal);

        emit("startup_complete", -1, null);
        for (Thread t : threads) t.start();
        closed.await();
        emit("shutdown_complete", -1, null);
        System.exit(0);
    }
}
