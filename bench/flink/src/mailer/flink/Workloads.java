package mailer.flink;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.eventtime.SerializableTimestampAssigner;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.FilterFunction;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.tuple.Tuple4;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * W1 to W5 of docs/workloads.md on Apache Flink (DataStream API, local mini-cluster), for
 * comparing mailer with Flink on the same machine. W4 (the interval join) is in {@link
 * IntervalJoin}, W5 (the stream-table join) in {@link TableJoin}.
 *
 * <pre>
 *   Workloads --list        the variant names (MAILER_BENCH_PARALLELISM="1 2" adds -p2 ones)
 *   Workloads NAME          runs one variant and prints its `bench NAME ...` line
 * </pre>
 *
 * Environment: MAILER_BENCH_RECORDS (N, default 20,000,000), MAILER_BENCH_RUNS (default 1;
 * secs is the median), MAILER_BENCH_PARALLELISM (default 1), MAILER_FLINK_CONF (extra Flink
 * options, "key=value" separated by spaces). Checkpointing is off. Exits with status 1 when the
 * sink did not see the expected number of records.
 */
public final class Workloads {
    private static final Pattern NAME = Pattern.compile("flink-w([1-5])(-rocksdb)?(?:-p([0-9]+))?");

    /** Record encoding: (key, value, event_time_ms). */
    public static final class ByKey implements KeySelector<Tuple3<Long, Long, Long>, Long> {
        private static final long serialVersionUID = 1L;

        @Override
        public Long getKey(Tuple3<Long, Long, Long> r) {
            return r.f0;
        }
    }

    /** W1: value := value x 2. */
    public static final class TimesTwo implements MapFunction<Tuple3<Long, Long, Long>, Tuple3<Long, Long, Long>> {
        private static final long serialVersionUID = 1L;

        @Override
        public Tuple3<Long, Long, Long> map(Tuple3<Long, Long, Long> r) {
            return new Tuple3<>(r.f0, r.f1 * 2, r.f2);
        }
    }

    /** W1: keeps (value x 2) % 4 == 0. */
    public static final class Mod4 implements FilterFunction<Tuple3<Long, Long, Long>> {
        private static final long serialVersionUID = 1L;

        @Override
        public boolean filter(Tuple3<Long, Long, Long> r) {
            return r.f1 % 4 == 0;
        }
    }

    /** W2: the running sum of the values of a key; the keyed reduce emits every update. */
    public static final class Sum implements ReduceFunction<Tuple3<Long, Long, Long>> {
        private static final long serialVersionUID = 1L;

        @Override
        public Tuple3<Long, Long, Long> reduce(Tuple3<Long, Long, Long> acc, Tuple3<Long, Long, Long> r) {
            return new Tuple3<>(r.f0, acc.f1 + r.f1, r.f2);
        }
    }

    /** W3: count and sum of a window, accumulated per record as {count, sum}. */
    public static final class CountSum implements AggregateFunction<Tuple3<Long, Long, Long>, long[], long[]> {
        private static final long serialVersionUID = 1L;

        @Override
        public long[] createAccumulator() {
            return new long[2];
        }

        @Override
        public long[] add(Tuple3<Long, Long, Long> r, long[] acc) {
            acc[0] += 1;
            acc[1] += r.f1;
            return acc;
        }

        @Override
        public long[] getResult(long[] acc) {
            return acc;
        }

        @Override
        public long[] merge(long[] a, long[] b) {
            a[0] += b[0];
            a[1] += b[1];
            return a;
        }
    }

    /** W3: one (key, window start, count, sum) per fired window. */
    public static final class WindowResult
            extends ProcessWindowFunction<long[], Tuple4<Long, Long, Long, Long>, Long, TimeWindow> {
        private static final long serialVersionUID = 1L;

        @Override
        public void process(Long key, Context ctx, Iterable<long[]> results, Collector<Tuple4<Long, Long, Long, Long>> out) {
            long[] r = results.iterator().next();
            out.collect(new Tuple4<>(key, ctx.window().getStart(), r[0], r[1]));
        }
    }

    public static final class EventTime implements SerializableTimestampAssigner<Tuple3<Long, Long, Long>> {
        private static final long serialVersionUID = 1L;

        @Override
        public long extractTimestamp(Tuple3<Long, Long, Long> r, long previous) {
            return r.f2;
        }
    }

    private static long envLong(String name, long def) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? def : Long.parseLong(v.trim());
    }

    private static List<Integer> parallelisms() {
        String v = System.getenv("MAILER_BENCH_PARALLELISM");
        List<Integer> out = new ArrayList<>();
        for (String p : (v == null || v.isBlank() ? "1" : v).trim().split("[\\s,]+")) {
            out.add(Integer.parseInt(p));
        }
        return out;
    }

    static List<String> variants() {
        List<String> out = new ArrayList<>();
        for (int p : parallelisms()) {
            String suffix = p == 1 ? "" : "-p" + p;
            for (String base : new String[] {
                "flink-w1",
                "flink-w2", "flink-w2-rocksdb",
                "flink-w3", "flink-w3-rocksdb",
                "flink-w4", "flink-w4-rocksdb",
                "flink-w5", "flink-w5-rocksdb"
            }) {
                out.add(base + suffix);
            }
        }
        return out;
    }

    /**
     * Records at the sink: W1 keeps the even g, W2 and W5 emit one per (stream) record, W3 one per
     * (key, window), W4 one per matching pair ({@link IntervalJoin#expected}).
     */
    static long expected(int workload, long n) {
        switch (workload) {
            case 1:
                return n / 2 + n % 2;
            case 2:
            case 5:
                return n;
            case 4:
                return IntervalJoin.expected(n);
            default:
                long keys = 1_000, divisor = 10;
                BitSet seen = new BitSet();
                for (long g = 0; g < n; g++) {
                    long window = g / divisor / 1000;
                    seen.set(Math.toIntExact(window * keys + GeneratedRecords.keyOf(g, keys)));
                }
                return seen.cardinality();
        }
    }

    /** W1 to W5 from the generator(s) to the counting sink. */
    static void build(StreamExecutionEnvironment env, int workload, long n, int parallelism) {
        switch (workload) {
            case 1: {
                DataStream<Tuple3<Long, Long, Long>> src =
                        env.fromSource(new GeneratedRecords(n, 0, 1, parallelism), WatermarkStrategy.noWatermarks(), "generator");
                src.map(new TimesTwo()).filter(new Mod4()).sinkTo(new CountingSink<>());
                break;
            }
            case 2: {
                DataStream<Tuple3<Long, Long, Long>> src = env.fromSource(
                        new GeneratedRecords(n, 100_000, 1, parallelism), WatermarkStrategy.noWatermarks(), "generator");
                src.keyBy(new ByKey()).reduce(new Sum()).sinkTo(new CountingSink<>());
                break;
            }
            case 4:
                IntervalJoin.build(env, n, parallelism);
                break;
            case 5:
                TableJoin.build(env, n, parallelism);
                break;
            default: {
                // Flink's watermark t promises no more records with ts <= t, so "watermark = max
                // ts" of the definition (window [a, b) closes once a record with ts >= b came) is
                // Flink's monotonous-timestamps strategy (max ts - 1), emitted every 200 ms
                // (pipeline.auto-watermark-interval) and at the end of the input.
                WatermarkStrategy<Tuple3<Long, Long, Long>> wm =
                        WatermarkStrategy.<Tuple3<Long, Long, Long>>forMonotonousTimestamps()
                                .withTimestampAssigner(new EventTime());
                DataStream<Tuple3<Long, Long, Long>> src =
                        env.fromSource(new GeneratedRecords(n, 1_000, 10, parallelism), wm, "generator");
                src.keyBy(new ByKey())
                        .window(TumblingEventTimeWindows.of(Duration.ofSeconds(1)))
                        .aggregate(new CountSum(), new WindowResult())
                        .sinkTo(new CountingSink<>());
            }
        }
    }

    private static long peakRssKib() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", ""));
                }
            }
        } catch (Exception e) {
            // not Linux
        }
        return 0;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: Workloads --list | Workloads flink-w{1,2,3,4,5}[-rocksdb][-pP]");
            System.exit(2);
        }
        if (args[0].equals("--list")) {
            variants().forEach(System.out::println);
            return;
        }
        String name = args[0];
        Matcher m = NAME.matcher(name);
        if (!m.matches() || (m.group(1).equals("1") && m.group(2) != null)) {
            System.err.println("unknown variant " + name + " (see --list)");
            System.exit(2);
        }
        int workload = Integer.parseInt(m.group(1));
        boolean rocksdb = m.group(2) != null;
        int parallelism = m.group(3) == null ? 1 : Integer.parseInt(m.group(3));
        long n = envLong("MAILER_BENCH_RECORDS", 20_000_000);
        int runs = (int) Math.max(1, envLong("MAILER_BENCH_RUNS", 1));
        if (GeneratedRecords.splitmix64(0) != 0xE220A8397B1DCDAFL) {
            throw new AssertionError("splitmix64 does not match the reference");
        }
        long expected = expected(workload, n);

        Map<String, String> options = new HashMap<>();
        // W1 has no state; the option is set anyway, it changes nothing there.
        options.put(StateBackendOptions.STATE_BACKEND.key(), rocksdb ? "rocksdb" : "hashmap");
        String extra = System.getenv("MAILER_FLINK_CONF");
        if (extra != null && !extra.isBlank()) {
            for (String kv : extra.trim().split("\\s+")) {
                int eq = kv.indexOf('=');
                if (eq <= 0) {
                    System.err.println("MAILER_FLINK_CONF: expected key=value, got " + kv);
                    System.exit(2);
                }
                options.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }
        Configuration conf = Configuration.fromMap(options);

        List<Double> secs = new ArrayList<>();
        List<Double> walls = new ArrayList<>();
        long sinkRecords = 0;
        for (int run = 0; run < runs; run++) {
            CountingSink.reset();
            // A local environment starts a mini-cluster (one TaskManager, `parallelism` slots)
            // inside execute() and stops it after the job.
            StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
            build(env, workload, n, parallelism);
            long t0 = System.nanoTime();
            JobExecutionResult result = env.execute(name);
            walls.add((System.nanoTime() - t0) / 1e9);
            sinkRecords = CountingSink.total();
            if (sinkRecords != expected) {
                System.err.printf(Locale.ROOT, "%s: %d records at the sink, expected %d%n", name, sinkRecords, expected);
                System.exit(1);
            }
            secs.add(result.getNetRuntime() / 1000.0);
        }
        double median = median(secs);
        System.out.printf(
                Locale.ROOT,
                "bench %s records=%d secs=%.3f rec_per_s=%.0f sink_records=%d peak_rss_kib=%d wall_secs=%.3f runs=%d%n",
                name, n, median, n / median, sinkRecords, peakRssKib(), median(walls), runs);
    }

    private static double median(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs);
        Collections.sort(s);
        return s.get(s.size() / 2);
    }
}
