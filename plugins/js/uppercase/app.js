// Map (JavaScript): upper-cases the value of each record (ASCII letters).

function uppercase(rec) {
  rec.value = rec.value.map((c) => (c >= 97 && c <= 122 ? c - 32 : c));
  return rec;
}

const world = mapWorld(uppercase);
export const map = world.map;
export const mapBatch = world.mapBatch;
