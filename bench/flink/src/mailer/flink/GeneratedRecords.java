package mailer.flink;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource.NumberSequenceSplit;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.connector.datagen.source.GeneratingIteratorSourceReader;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * The bounded source of docs/workloads.md: records {@code (key, value, event_time_ms)} for
 * {@code g} in {@code [0, N)}, key = splitmix64(g + salt) mod K (0 when the workload has no keys;
 * the salt is 0 except for W4's source B, 2^40), value = g, event time = g / D.
 *
 * <p>Built from Flink's own pieces: the splits, enumerator and serializers of {@link
 * NumberSequenceSource} and the reader of the datagen connector ({@link
 * GeneratingIteratorSourceReader}), which turns each number into a record in the source task.
 * (The datagen connector's {@code DataGeneratorSource} wraps that reader in a rate limiter that
 * makes the task yield after every record, even with no limit set; this source does not.)
 *
 * <p>With P parallel splits, split s produces g = s, s+P, s+2P, ... so event time advances
 * together on every split: split s numbers its records {@code (s << 40) + i} and the generator
 * maps that back to {@code g = i * P + s}.
 */
public final class GeneratedRecords
        implements Source<Tuple3<Long, Long, Long>, NumberSequenceSplit, Collection<NumberSequenceSplit>>,
                ResultTypeQueryable<Tuple3<Long, Long, Long>> {

    private static final long serialVersionUID = 1L;
    static final int LANE_BITS = 40;
    static final long LANE_MASK = (1L << LANE_BITS) - 1;

    private final long n;
    private final long keys;
    private final long keySalt;
    private final long divisor;
    private final int parallelism;
    private final Lanes lanes;

    /** N records over {@code keys} keys (0: no keys), event time g / divisor, P splits. */
    public GeneratedRecords(long n, long keys, long divisor, int parallelism) {
        this(n, keys, 0, divisor, parallelism);
    }

    /** The same with key = splitmix64(g + keySalt) mod keys (W4's source B). */
    public GeneratedRecords(long n, long keys, long keySalt, long divisor, int parallelism) {
        if (n <= 0 || n >= (1L << LANE_BITS)) {
            throw new IllegalArgumentException("records must be in [1, 2^40): " + n);
        }
        this.n = n;
        this.keys = keys;
        this.keySalt = keySalt;
        this.divisor = divisor;
        this.parallelism = parallelism;
        this.lanes = new Lanes(n, parallelism);
    }

    /** SplitMix64's output function, 64-bit wrapping arithmetic. */
    public static long splitmix64(long g) {
        long z = g + 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** key = splitmix64(g) mod K, unsigned. */
    public static long keyOf(long g, long keys) {
        return Long.remainderUnsigned(splitmix64(g), keys);
    }

    @Override
    public Boundedness getBoundedness() {
        return Boundedness.BOUNDED;
    }

    @Override
    public TypeInformation<Tuple3<Long, Long, Long>> getProducedType() {
        return Types.TUPLE(Types.LONG, Types.LONG, Types.LONG);
    }

    @Override
    public SourceReader<Tuple3<Long, Long, Long>, NumberSequenceSplit> createReader(SourceReaderContext context) {
        return new GeneratingIteratorSourceReader<>(context, new Generator(keys, keySalt, divisor, parallelism));
    }

    @Override
    public SplitEnumerator<NumberSequenceSplit, Collection<NumberSequenceSplit>> createEnumerator(
            SplitEnumeratorContext<NumberSequenceSplit> context) {
        return lanes.createEnumerator(context);
    }

    @Override
    public SplitEnumerator<NumberSequenceSplit, Collection<NumberSequenceSplit>> restoreEnumerator(
            SplitEnumeratorContext<NumberSequenceSplit> context, Collection<NumberSequenceSplit> checkpoint) {
        return lanes.restoreEnumerator(context, checkpoint);
    }

    @Override
    public SimpleVersionedSerializer<NumberSequenceSplit> getSplitSerializer() {
        return lanes.getSplitSerializer();
    }

    @Override
    public SimpleVersionedSerializer<Collection<NumberSequenceSplit>> getEnumeratorCheckpointSerializer() {
        return lanes.getEnumeratorCheckpointSerializer();
    }

    /** NumberSequenceSource whose P splits are the lanes {@code [s << 40, (s << 40) + count_s)}. */
    static final class Lanes extends NumberSequenceSource {
        private static final long serialVersionUID = 1L;
        private final long n;
        private final int parallelism;

        Lanes(long n, int parallelism) {
            super(0, n - 1);
            this.n = n;
            this.parallelism = parallelism;
        }

        @Override
        protected List<NumberSequenceSplit> splitNumberRange(long from, long to, int numSplits) {
            if (numSplits != parallelism) {
                throw new IllegalStateException(
                        "the source runs at parallelism " + numSplits + ", its records were laid out for " + parallelism);
            }
            List<NumberSequenceSplit> splits = new ArrayList<>();
            for (int s = 0; s < parallelism; s++) {
                // g = s, s + P, s + 2P, ... below N
                long count = n / parallelism + (s < n % parallelism ? 1 : 0);
                if (count > 0) {
                    long start = (long) s << LANE_BITS;
                    splits.add(new NumberSequenceSplit(String.valueOf(s), start, start + count - 1));
                }
            }
            return splits;
        }
    }

    /** Lane number -> (key, value, event time). */
    static final class Generator implements GeneratorFunction<Long, Tuple3<Long, Long, Long>> {
        private static final long serialVersionUID = 1L;
        private final long keys;
        private final long keySalt;
        private final long divisor;
        private final long parallelism;

        Generator(long keys, long keySalt, long divisor, int parallelism) {
            this.keys = keys;
            this.keySalt = keySalt;
            this.divisor = divisor;
            this.parallelism = parallelism;
        }

        @Override
        public Tuple3<Long, Long, Long> map(Long lane) {
            long j = lane;
            long g = (j & LANE_MASK) * parallelism + (j >>> LANE_BITS);
            long key = keys > 0 ? keyOf(g + keySalt, keys) : 0L;
            return new Tuple3<>(key, g, g / divisor);
        }
    }
}
