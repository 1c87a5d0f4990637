// Command franz-go-verifiable-consumer is a VerifiableConsumer-style benchmark peer on
// franz-go (github.com/twmb/franz-go/pkg/kgo): the command line and stdout JSON lines of
// Kafka's system-test consumer org.apache.kafka.tools.VerifiableConsumer (the subset the
// rejoin-latency benchmark uses), plus --members N.
//
//	(cd bench/peers/franz-go && go build -o ../../../target/bench-peers/franz-go-verifiable-consumer .)
//	target/bench-peers/franz-go-verifiable-consumer --bootstrap-server 127.0.0.1:9092 \
//	    --topic t --group-id g [--group-protocol classic|consumer] [--group-instance-id ID] \
//	    [--session-timeout MS] [--consumer.config FILE] [--members N]
//
// Flags:
//
//   - --bootstrap-server, --topic, --group-id: required.
//   - --group-protocol classic|consumer (default classic). franz-go v1.22 implements KIP-848
//     behind the ServerSideBalancer() option (off by default); `consumer` turns it on. The
//     balancer stays franz-go's default CooperativeStickyBalancer, which franz-go maps to
//     the broker's "uniform" assignor (the broker default, as Java and librdkafka use).
//     Note: franz-go silently falls back to the classic protocol when the broker does not
//     serve ConsumerGroupHeartbeat v1+ (Kafka < 4.0).
//   - --group-instance-id ID: static membership (kgo.InstanceID); with --members N > 1
//     member i uses "ID-i".
//   - --session-timeout MS: kgo.SessionTimeout, classic protocol only (an error with
//     `consumer`, as in Java).
//   - --consumer.config FILE / --command-config FILE: a Java .properties file; only
//     session.timeout.ms and heartbeat.interval.ms are mapped (to kgo.SessionTimeout /
//     kgo.HeartbeatInterval, classic protocol only: with `consumer` the broker sets both);
//     every other key is ignored. The command line wins over the file.
//   - --fix-static-leave (extension, consumer protocol with --group-instance-id only):
//     franz-go v1.22.3's KIP-848 static leave (epoch -2) omits the instance id, the broker
//     rejects it (INVALID_REQUEST "InstanceId can't be null") and keeps the instance held,
//     so a restarted static member gets UNRELEASED_INSTANCE_ID until the old member's
//     session times out. With this flag the peer lets franz-go leave, then sends the
//     epoch -2 ConsumerGroupHeartbeat itself with the instance id, then closes. Without
//     it (default) the close is franz-go's own.
//   - --members N: N members of the group in this process, one kgo.Client each, each
//     polled by its own goroutine; every event line then carries "member": i.
//   - --max-messages, --reset-policy, --verbose, --enable-autocommit, --close-timeout,
//     --assignment-strategy, --group-remote-assignor: accepted and ignored (records are
//     polled and dropped).
//
// Events, one JSON object per line, flushed, "timestamp" in ms since the epoch:
// startup_complete (once, right before the first client is created: a group client
// starts joining on creation), partitions_assigned / partitions_revoked with
// "partitions":[{"topic","partition"}] from OnPartitionsAssigned / OnPartitionsRevoked
// (OnPartitionsLost is reported as revoked, like Java's default onPartitionsLost; with a
// cooperative balancer or KIP-848 only the added / removed partitions),
// shutdown_requested, shutdown_complete (after every client closed with franz-go's default
// Close: a dynamic member leaves, a static member does not leave in the classic protocol
// and sends the epoch -2 leave in KIP-848, which the broker rejects: see --fix-static-leave).
//
// Environment: FRANZ_GO_LOG=error|warn|info|debug sends franz-go's log to stderr (default:
// no log).
//
// Auto commit is off (kgo.DisableAutoCommit). Exit status 0 after a close, 1 for argument
// or configuration errors.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var outMu sync.Mutex

type tp struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// emit prints one event line; member < 0 omits the "member" field.
func emit(name string, member int, partitions []tp) {
	var b strings.Builder
	b.WriteString(`{"timestamp":`)
	b.WriteString(strconv.FormatInt(time.Now().UnixMilli(), 10))
	b.WriteString(`,"name":`)
	n, _ := json.Marshal(name)
	b.Write(n)
	if member >= 0 {
		b.WriteString(`,"member":`)
		b.WriteString(strconv.Itoa(member))
	}
	if partitions != nil {
		p, _ := json.Marshal(partitions)
		b.WriteString(`,"partitions":`)
		b.Write(p)
	}
	b.WriteString("}\n")
	outMu.Lock()
	os.Stdout.WriteString(b.String()) // os.Stdout is unbuffered: one write per line
	outMu.Unlock()
}

func toTPs(m map[string][]int32) []tp {
	out := []tp{}
	for topic, parts := range m {
		for _, p := range parts {
			out = append(out, tp{topic, p})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "franz-go verifiable consumer: error: "+format+"\n", args...)
	os.Exit(1)
}

var valued = map[string]bool{
	"--bootstrap-server": true, "--topic": true, "--group-id": true, "--group-protocol": true,
	"--group-instance-id": true, "--session-timeout": true, "--consumer.config": true,
	"--command-config": true, "--members": true, "--max-messages": true, "--reset-policy": true,
	"--close-timeout": true, "--assignment-strategy": true, "--group-remote-assignor": true,
}

// staticLeave848 sends the KIP-848 static-member leave (epoch -2) with the instance id, which
// franz-go v1.22.3's own leave848 leaves out (the broker answers INVALID_REQUEST "InstanceId
// can't be null", so the instance stays held until the session times out). Called after
// franz-go's LeaveGroupContext, which stopped the heartbeats, and before Close.
func staticLeave848(cl *kgo.Client, group, memberID, instanceID string) {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group = group
	req.MemberID = memberID
	req.MemberEpoch = -2
	req.InstanceID = &instanceID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "franz-go verifiable consumer: static leave of %s: %v\n", instanceID, err)
	}
}

func parseArgs(argv []string) map[string]string {
	values := map[string]string{}
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		flag, value, inline := arg, "", false
		if strings.HasPrefix(arg, "--") {
			if f, v, ok := strings.Cut(arg, "="); ok {
				flag, value, inline = f, v, true
			}
		}
		switch {
		case flag == "-h" || flag == "--help":
			fmt.Println("see the header of bench/peers/franz-go/main.go")
			os.Exit(0)
		case flag == "--verbose" || flag == "--enable-autocommit" || flag == "--fix-static-leave":
			values[flag] = "true"
		case valued[flag]:
			if !inline {
				if i+1 >= len(argv) {
					die("argument %s: expected one argument", flag)
				}
				i++
				value = argv[i]
			}
			values[flag] = value
		default:
			die("unrecognized argument %q", arg)
		}
	}
	for _, req := range []string{"--bootstrap-server", "--topic", "--group-id"} {
		if _, ok := values[req]; !ok {
			die("argument %s is required", req)
		}
	}
	return values
}

func readProperties(path string) map[string]string {
	f, err := os.Open(path)
	if err != nil {
		die("cannot read %s: %v", path, err)
	}
	defer f.Close()
	props := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		sep := strings.IndexAny(line, "=:")
		if sep < 0 {
			props[line] = ""
			continue
		}
		props[strings.TrimSpace(line[:sep])] = strings.TrimSpace(line[sep+1:])
	}
	return props
}

func msValue(key, v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		die("%s: %q is not a positive integer", key, v)
	}
	return time.Duration(n) * time.Millisecond
}

func main() {
	args := parseArgs(os.Args[1:])
	protocol := strings.ToLower(args["--group-protocol"])
	if protocol == "" {
		protocol = "classic"
	}
	if protocol != "classic" && protocol != "consumer" {
		die("argument --group-protocol: %q is not one of classic, consumer", protocol)
	}
	members := 1
	if v, ok := args["--members"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			die("argument --members: %q must be a positive integer", v)
		}
		members = n
	}

	props := map[string]string{}
	for _, key := range []string{"--consumer.config", "--command-config"} {
		if path, ok := args[key]; ok {
			for k, v := range readProperties(path) {
				props[k] = v
			}
		}
	}
	if v, ok := args["--session-timeout"]; ok {
		if protocol == "consumer" {
			die("--session-timeout is not supported with --group-protocol consumer")
		}
		props["session.timeout.ms"] = v
	}

	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(args["--bootstrap-server"], ",")...),
		kgo.ConsumerGroup(args["--group-id"]),
		kgo.ConsumeTopics(args["--topic"]),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if lv, ok := os.LookupEnv("FRANZ_GO_LOG"); ok {
		levels := map[string]kgo.LogLevel{"error": kgo.LogLevelError, "warn": kgo.LogLevelWarn,
			"info": kgo.LogLevelInfo, "debug": kgo.LogLevelDebug}
		level, ok := levels[strings.ToLower(lv)]
		if !ok {
			die("FRANZ_GO_LOG: %q is not one of error, warn, info, debug", lv)
		}
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, nil)))
	}
	if protocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer())
		for _, k := range []string{"session.timeout.ms", "heartbeat.interval.ms"} {
			if _, ok := props[k]; ok {
				fmt.Fprintf(os.Stderr, "franz-go verifiable consumer: %s ignored with the consumer protocol (the broker sets it)\n", k)
			}
		}
	} else {
		if v, ok := props["session.timeout.ms"]; ok {
			opts = append(opts, kgo.SessionTimeout(msValue("session.timeout.ms", v)))
		}
		if v, ok := props["heartbeat.interval.ms"]; ok {
			opts = append(opts, kgo.HeartbeatInterval(msValue("heartbeat.interval.ms", v)))
		}
	}

	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	fixLeave := protocol == "consumer" && args["--fix-static-leave"] != ""
	clients := make([]*kgo.Client, members)
	instanceIDs := make([]string, members)
	// A group client starts managing its group (FindCoordinator, join) as soon as it exists:
	// startup_complete goes out before the first one is created.
	emit("startup_complete", -1, nil)
	for i := range members {
		tag := -1
		if members > 1 {
			tag = i
		}
		memberOpts := append([]kgo.Opt{}, opts...)
		if id, ok := args["--group-instance-id"]; ok {
			if members > 1 {
				id = fmt.Sprintf("%s-%d", id, i)
			}
			memberOpts = append(memberOpts, kgo.InstanceID(id))
			instanceIDs[i] = id
		}
		memberOpts = append(memberOpts,
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				emit("partitions_assigned", tag, toTPs(m))
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				emit("partitions_revoked", tag, toTPs(m))
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				emit("partitions_revoked", tag, toTPs(m))
			}),
		)
		cl, err := kgo.NewClient(memberOpts...)
		if err != nil {
			die("configuration: %v", err)
		}
		clients[i] = cl
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func(cl *kgo.Client) {
			defer wg.Done()
			// The group is managed in the background; polling only drains records.
			for ctx.Err() == nil {
				fetches := cl.PollFetches(ctx)
				if fetches.IsClientClosed() {
					return
				}
			}
		}(cl)
	}

	<-stop
	emit("shutdown_requested", -1, nil)
	cancel()
	wg.Wait()
	var closing sync.WaitGroup
	for i, cl := range clients {
		closing.Add(1)
		go func(cl *kgo.Client) {
			defer closing.Done()
			if fixLeave && instanceIDs[i] != "" {
				memberID, _ := cl.GroupMetadata()
				_ = cl.LeaveGroupContext(context.Background()) // franz-go's leave: INVALID_REQUEST
				staticLeave848(cl, args["--group-id"], memberID, instanceIDs[i])
			}
			cl.Close()
		}(cl)
	}
	closing.Wait()
	emit("shutdown_complete", -1, nil)
}
