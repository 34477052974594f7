// The library's public entry point.
export { formatDate, formatRelative } from "./format.js";
export { parseDate } from "./parse.js";
