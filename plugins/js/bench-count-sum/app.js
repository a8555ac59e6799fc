// Aggregate (JavaScript): the Rust plugin plugins/fixtures/bench-count-sum
// in JavaScript: the count and sum of a window's values (decimal integers);
// the result is `{"count":n,"sum":s}`. The accumulator is the same JSON,
// `{"count":n,"sum":s}`, so windows opened by either plugin finish in the
// other. JSON numbers are doubles in JavaScript: sums beyond ±2^53 lose
// precision here, not in the Rust plugin.

/** `a + b` wrapped into the 64-bit range, as Rust's `wrapping_add` does. */
const wrappingAdd = (a, b) => Number(BigInt.asIntN(64, BigInt(a) + BigInt(b)));

/** The running count and sum. */
const countSum = {
  create: () => ({ count: 0, sum: 0 }),
  add: (acc, rec) => ({ count: acc.count + 1, sum: wrappingAdd(acc.sum, valueI64(rec)) }),
  merge: (acc, later) => ({ count: acc.count + later.count, sum: wrappingAdd(acc.sum, later.sum) }),
  finish: (acc) => `{"count":${acc.count},"sum":${acc.sum}}`,
};

const world = aggregateWorld(countSum);
export const create = world.create;
export const add = world.add;
export const merge = world.merge;
export const finish = world.finish;
export const addBatch = world.addBatch;
export const finishBatch = world.finishBatch;
