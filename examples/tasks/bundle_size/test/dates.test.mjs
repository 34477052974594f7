import assert from "node:assert/strict";
import { test } from "node:test";

import { formatDate, formatRelative, parseDate } from "../src/index.js";

test("formats ISO dates", () => {
  assert.equal(formatDate(new Date(Date.UTC(2024, 2, 5))), "2024-03-05");
});

test("formats long dates", () => {
  assert.equal(formatDate(new Date(Date.UTC(2024, 2, 5)), { long: true }), "Tuesday, 5 March 2024");
});

test("formats relative times", () => {
  const now = new Date(Date.UTC(2024, 0, 10));
  assert.equal(formatRelative(new Date(Date.UTC(2024, 0, 7)), now), "3 days ago");
  assert.equal(formatRelative(new Date(Date.UTC(2024, 0, 10, 2)), now), "in 2 hours");
  assert.equal(formatRelative(now, now), "just now");
});

test("parses both forms", () => {
  assert.equal(parseDate("2024-03-05").getTime(), Date.UTC(2024, 2, 5));
  assert.equal(parseDate("5 march 2024").getTime(), Date.UTC(2024, 2, 5));
  assert.equal(parseDate("tomorrow"), null);
});
