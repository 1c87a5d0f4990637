// Waits until the test broker's group coordinator is really usable, using only the
// kafka-clients Admin API that is already in the broker's libs/ (no Rust, no build step).
//
//   java -cp "$dir/libs/*" tests/kafka/WaitCoordinator.java BOOTSTRAP [BROKERS] [TIMEOUT_S]
//
// (JDK 11+ single-file source launcher.) Exit 0 when ready, 1 on timeout, 2 on bad usage.
//
// Why: an open client port only means the broker is unfenced. __consumer_offsets is created
// by the first FindCoordinator, which answers COORDINATOR_NOT_AVAILABLE until the topic and
// its leaders exist, and a fresh partition leader then answers COORDINATOR_LOAD_IN_PROGRESS
// while it loads. So:
//   1. wait until describeCluster() sees BROKERS brokers;
//   2. describe group "warmup" (FindCoordinator creates the offsets topic) until it answers;
//   3. read the partition count of __consumer_offsets and describe one group per partition
//      (group -> partition is abs(groupId.hashCode()) % partitions, as in the coordinator),
//      so every coordinator partition, on every node, is loaded.
// A group that does not exist is an answer from a loaded coordinator, so
// GroupIdNotFoundException counts as success. The Admin client retries
// COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR internally
// until the per-call timeout; this program retries calls until the overall deadline.
//
// Client logging: log4j2 finds no configuration here and keeps its default, ERROR only.

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.errors.GroupIdNotFoundException;

public class WaitCoordinator {
    static final String OFFSETS_TOPIC = "__consumer_offsets";
    static final int CALL_TIMEOUT_MS = 5000;

    public static void main(String[] args) throws Exception {
        if (args.length < 1 || args.length > 3) {
            System.err.println("usage: WaitCoordinator BOOTSTRAP [BROKERS=1] [TIMEOUT_S=60]");
            System.exit(2);
        }
        String bootstrap = args[0];
        int brokers = args.length > 1 ? Integer.parseInt(args[1]) : 1;
        long timeoutS = args.length > 2 ? Long.parseLong(args[2]) : 60;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutS);

        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "wait-coordinator");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, CALL_TIMEOUT_MS);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, CALL_TIMEOUT_MS);
        p.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, 100);
        // By name: the constant is new in kafka-clients 3.7, and this program runs on the
        // clients of whatever version the broker is (a 3.6 client ignores the key).
        p.put("retry.backoff.max.ms", 500);

        String last = "no attempt";
        try (Admin admin = Admin.create(p)) {
            int step = 1;
            while (System.nanoTime() < deadline) {
                try {
                    if (step == 1) {
                        int n = admin.describeCluster(new DescribeClusterOptions().timeoutMs(CALL_TIMEOUT_MS))
                                .nodes().get().size();
                        if (n < brokers) {
                            last = "cluster has " + n + " of " + brokers + " brokers";
                            Thread.sleep(200);
                            continue;
                        }
                        step = 2;
                    }
                    if (step == 2) {
                        describeGroups(admin, List.of("warmup"));
                        step = 3;
                    }
                    TopicDescription td = admin.describeTopics(List.of(OFFSETS_TOPIC),
                                    new DescribeTopicsOptions().timeoutMs(CALL_TIMEOUT_MS))
                            .allTopicNames().get().get(OFFSETS_TOPIC);
                    int partitions = td.partitions().size();
                    boolean leaders = td.partitions().stream().allMatch(tp -> tp.leader() != null);
                    if (!leaders) {
                        last = OFFSETS_TOPIC + " has a partition without a leader";
                        Thread.sleep(200);
                        continue;
                    }
                    describeGroups(admin, groupPerPartition(partitions));
                    System.err.println("WaitCoordinator: group coordinator ready (" + partitions
                            + " offsets partition(s), " + brokers + " broker(s))");
                    return;
                } catch (ExecutionException e) {
                    last = String.valueOf(e.getCause());
                    Thread.sleep(200);
                }
            }
        }
        System.err.println("WaitCoordinator: timed out after " + timeoutS + " s; last: " + last);
        System.exit(1);
    }

    /** Describes the groups; a group that does not exist is a good answer. */
    static void describeGroups(Admin admin, List<String> groups) throws Exception {
        Map<String, ? extends KafkaFuture<?>> futures = admin.describeConsumerGroups(groups,
                new DescribeConsumerGroupsOptions().timeoutMs(CALL_TIMEOUT_MS)).describedGroups();
        for (KafkaFuture<?> f : futures.values()) {
            try {
                f.get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof GroupIdNotFoundException)) throw e;
            }
        }
    }

    /** One group id per offsets partition: partition = Utils.abs(id.hashCode()) % partitions. */
    static List<String> groupPerPartition(int partitions) {
        String[] byPartition = new String[partitions];
        int found = 0;
        for (int i = 0; found < partitions; i++) {
            String id = "warmup-" + i;
            int h = id.hashCode();
            int part = (h == Integer.MIN_VALUE ? 0 : Math.abs(h)) % partitions;
            if (byPartition[part] == null) {
                byPartition[part] = id;
                found++;
            }
        }
        return new ArrayList<>(List.of(byPartition));
    }
}
