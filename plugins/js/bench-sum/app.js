// Reduce (JavaScript): the running sum of each key's values, as the Rust
// plugin plugins/fixtures/bench-sum computes it. The accumulator, held by
// the host per key, is the sum as decimal text.

function runningSum(accumulator, rec) {
  let total = 0n;
  if (accumulator !== undefined) {
    total = parseI64(accumulator);
    if (total === undefined) throw new Error("the accumulator is not a 64-bit integer");
  }
  total += valueI64(rec);
  if (total < I64_MIN || total > I64_MAX) throw new Error("the sum overflows");
  return String(total);
}

const world = reduceWorld(runningSum);
export const reduce = world.reduce;
export const reduceBatch = world.reduceBatch;
