package mailer.flink;

import java.time.Duration;
import java.util.Arrays;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.ProcessJoinFunction;
import org.apache.flink.util.Collector;

/**
 * W4 of docs/workloads.md, the interval join: two generated sources A and B of N / 2 records
 * each ({@code g} in {@code [0, N/2)}, event time g / 10), A keyed by splitmix64(g) mod 100,000
 * and B by splitmix64(g + 2^40) mod 100,000, joined on equal key with |ts_A - ts_B| <= 1 s
 * (Flink's {@code intervalJoin(...).between(-1 s, +1 s)}, both bounds inclusive), one record per
 * matching pair.
 *
 * <p>Each source's watermark is max ts (Flink's monotonous-timestamps strategy, as in W3); the
 * join operator's is the minimum over its two inputs, which Flink does by itself. A record is
 * never late for the join (its ts is above its own source's watermark, so above the minimum),
 * hence none is dropped and the sink count is exactly the model's ({@link #expected}).
 */
final class IntervalJoin {
    static final long KEYS = 100_000;
    static final long DIVISOR = 10;
    static final long BOUND_MS = 1_000;
    /** Added to g before hashing B's key, so B's keys are not A's. */
    static final long B_SALT = 1L << 40;

    private IntervalJoin() {}

    /** One record per matching pair: (key, value_a + value_b, the later of the two event times). */
    public static final class Pair
            extends ProcessJoinFunction<Tuple3<Long, Long, Long>, Tuple3<Long, Long, Long>, Tuple3<Long, Long, Long>> {
        private static final long serialVersionUID = 1L;

        @Override
        public void processElement(
                Tuple3<Long, Long, Long> a,
                Tuple3<Long, Long, Long> b,
                Context ctx,
                Collector<Tuple3<Long, Long, Long>> out) {
            out.collect(new Tuple3<>(a.f0, a.f1 + b.f1, ctx.getTimestamp()));
        }
    }

    /** Sources A and B, key_by key on both, the interval join, the counting sink. */
    static void build(StreamExecutionEnvironment env, long n, int parallelism) {
        WatermarkStrategy<Tuple3<Long, Long, Long>> wm =
                WatermarkStrategy.<Tuple3<Long, Long, Long>>forMonotonousTimestamps()
                        .withTimestampAssigner(new Workloads.EventTime());
        long half = n / 2;
        DataStream<Tuple3<Long, Long, Long>> a =
                env.fromSource(new GeneratedRecords(half, KEYS, 0, DIVISOR, parallelism), wm, "generator A");
        DataStream<Tuple3<Long, Long, Long>> b =
                env.fromSource(new GeneratedRecords(half, KEYS, B_SALT, DIVISOR, parallelism), wm, "generator B");
        a.keyBy(new Workloads.ByKey())
                .intervalJoin(b.keyBy(new Workloads.ByKey()))
                .between(Duration.ofMillis(-BOUND_MS), Duration.ofMillis(BOUND_MS))
                .process(new Pair())
                .sinkTo(new CountingSink<>());
    }

    /**
     * The number of matching pairs, by brute force over the same generators: B's event times
     * grouped by key (a counting sort, ascending within a key since g ascends), then for each A
     * record two binary searches in its key's group for the B records with ts in
     * [ts_A - 1 s, ts_A + 1 s]. O(N log(N / K)) time, 4 bytes per B record.
     */
    static long expected(long n) {
        int half = Math.toIntExact(n / 2);
        int keys = Math.toIntExact(KEYS);
        // start[k] .. start[k + 1]: the slice of `times` holding key k's B records.
        int[] start = new int[keys + 1];
        for (long g = 0; g < half; g++) {
            start[(int) GeneratedRecords.keyOf(g + B_SALT, KEYS) + 1]++;
        }
        for (int k = 0; k < keys; k++) {
            start[k + 1] += start[k];
        }
        int[] next = Arrays.copyOf(start, keys);
        int[] times = new int[half];
        for (long g = 0; g < half; g++) {
            times[next[(int) GeneratedRecords.keyOf(g + B_SALT, KEYS)]++] = (int) (g / DIVISOR);
        }
        long pairs = 0;
        for (long g = 0; g < half; g++) {
            int k = (int) GeneratedRecords.keyOf(g, KEYS);
            long ts = g / DIVISOR;
            pairs += firstAtLeast(times, start[k], start[k + 1], ts + BOUND_MS + 1)
                    - firstAtLeast(times, start[k], start[k + 1], ts - BOUND_MS);
        }
        return pairs;
    }

    /** The first index in the ascending slice [from, to) of xs whose value is >= x (to if none). */
    private static int firstAtLeast(int[] xs, int from, int to, long x) {
        int lo = from, hi = to;
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (xs[mid] < x) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo;
    }
}
