package mailer.flink;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.KeyedCoProcessFunction;
import org.apache.flink.streaming.api.operators.BoundedMultiInput;
import org.apache.flink.streaming.api.operators.InputSelectable;
import org.apache.flink.streaming.api.operators.InputSelection;
import org.apache.flink.streaming.api.operators.co.KeyedCoProcessOperator;
import org.apache.flink.util.Collector;

/**
 * W5 of docs/workloads.md, the stream-table join: a table of K = 100,000 rows (key g, value g,
 * g in [0, K)), loaded first, and a stream of N records of W1's generator keyed by splitmix64(g)
 * mod K; each stream record is joined with its key's row and emits value_stream + value_table.
 *
 * <p>The DataStream API has no table join, so this is the usual hand-made one: the table and the
 * stream, keyed by key and {@code connect}ed, into a {@link KeyedCoProcessFunction} that keeps
 * each key's row in ValueState ({@link Join}).
 *
 * <p>"Loaded first": the function runs in {@link TableFirst}, Flink's keyed co-process operator
 * made {@link InputSelectable}. It reads only its first input (the table) until that input has
 * ended on every channel ({@link BoundedMultiInput#endInput}), then the stream; meanwhile the
 * stream's source runs until backpressure stops it. So the whole table is in state before any
 * stream record is joined, which {@link Join} checks: a stream record that finds no row fails
 * the job. (Flink's own batch hash joins read their build side first the same way. Flink refuses
 * InputSelectable operators with checkpointing on, which the benchmark leaves off.)
 */
final class TableJoin {
    static final long KEYS = 100_000;

    private TableJoin() {}

    /** Table row g: (key g, value g). */
    public static final class Row implements MapFunction<Long, Tuple2<Long, Long>> {
        private static final long serialVersionUID = 1L;

        @Override
        public Tuple2<Long, Long> map(Long g) {
            return new Tuple2<>(g, g);
        }
    }

    /** A table row's key. */
    public static final class RowKey implements KeySelector<Tuple2<Long, Long>, Long> {
        private static final long serialVersionUID = 1L;

        @Override
        public Long getKey(Tuple2<Long, Long> row) {
            return row.f0;
        }
    }

    /**
     * Input 1, the table: stores the key's row value. Input 2, the stream: emits (key,
     * value_stream + value_table, event time).
     */
    public static final class Join
            extends KeyedCoProcessFunction<Long, Tuple2<Long, Long>, Tuple3<Long, Long, Long>, Tuple3<Long, Long, Long>> {
        private static final long serialVersionUID = 1L;
        private transient ValueState<Long> row;

        @Override
        public void open(OpenContext context) {
            row = getRuntimeContext().getState(new ValueStateDescriptor<>("row", Types.LONG));
        }

        @Override
        public void processElement1(Tuple2<Long, Long> r, Context ctx, Collector<Tuple3<Long, Long, Long>> out)
                throws Exception {
            row.update(r.f1);
        }

        @Override
        public void processElement2(Tuple3<Long, Long, Long> r, Context ctx, Collector<Tuple3<Long, Long, Long>> out)
                throws Exception {
            Long value = row.value();
            if (value == null) {
                throw new IllegalStateException("stream record " + r + " came before its key's table row");
            }
            out.collect(new Tuple3<>(r.f0, r.f1 + value, r.f2));
        }
    }

    /** A keyed co-process operator that reads its first input to the end before its second. */
    static final class TableFirst<K, IN1, IN2, OUT> extends KeyedCoProcessOperator<K, IN1, IN2, OUT>
            implements InputSelectable, BoundedMultiInput {
        private static final long serialVersionUID = 1L;
        private boolean tableLoaded;

        TableFirst(KeyedCoProcessFunction<K, IN1, IN2, OUT> function) {
            super(function);
        }

        @Override
        public InputSelection nextSelection() {
            return tableLoaded ? InputSelection.SECOND : InputSelection.FIRST;
        }

        @Override
        public void endInput(int inputId) {
            if (inputId == 1) {
                tableLoaded = true;
            }
        }
    }

    /** The table source, the stream source, the keyed connect into the join, the counting sink. */
    static void build(StreamExecutionEnvironment env, long n, int parallelism) {
        DataStream<Tuple2<Long, Long>> table = env.fromSequence(0, KEYS - 1).name("table").map(new Row());
        DataStream<Tuple3<Long, Long, Long>> stream = env.fromSource(
                new GeneratedRecords(n, KEYS, 1, parallelism), WatermarkStrategy.noWatermarks(), "generator");
        table.connect(stream)
                .keyBy(new RowKey(), new Workloads.ByKey())
                .transform("table join", stream.getType(), new TableFirst<>(new Join()))
                .sinkTo(new CountingSink<>());
    }
}
