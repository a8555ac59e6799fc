// Tests of uppercase (`node test.mjs`).
import assert from "node:assert/strict";
import { loadPlugin } from "../../../guest-sdk/js/load-plugin.mjs";

const { uppercase, MapHarness, makeRecord } = loadPlugin(new URL("./app.js", import.meta.url));
assert.deepEqual(new MapHarness(uppercase).send(makeRecord("hi", "k", 3)), makeRecord("HI", "k", 3));
console.log("uppercase: ok");
