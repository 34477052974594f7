import { MONTHS, WEEKDAYS, pad } from "./names.js";

/** "2024-03-05" style, or with `{ long: true }` "Tuesday, 5 March 2024". */
export function formatDate(date, options = {}) {
  const year = date.getUTCFullYear();
  const month = date.getUTCMonth();
  const day = date.getUTCDate();
  if (options.long) {
    const weekday = WEEKDAYS[date.getUTCDay()];
    return `${weekday}, ${day} ${MONTHS[month]} ${year}`;
  }
  return `${year}-${pad(month + 1)}-${pad(day)}`;
}

/** "3 days ago", "in 2 hours", "just now". */
export function formatRelative(date, now = new Date()) {
  const seconds = Math.round((date.getTime() - now.getTime()) / 1000);
  const units = [
    ["year", 365 * 24 * 3600],
    ["month", 30 * 24 * 3600],
    ["day", 24 * 3600],
    ["hour", 3600],
    ["minute", 60],
  ];
  for (const [name, size] of units) {
    const count = Math.trunc(Math.abs(seconds) / size);
    if (count >= 1) {
      const label = count === 1 ? name : `${name}s`;
      return seconds < 0 ? `${count} ${label} ago` : `in ${count} ${label}`;
    }
  }
  return "just now";
}
