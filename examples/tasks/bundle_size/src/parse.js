import { MONTHS } from "./names.js";

/** Parses "2024-03-05" or "5 March 2024" into a Date at midnight UTC; null when it cannot. */
export function parseDate(text) {
  const iso = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text.trim());
  if (iso) {
    return new Date(Date.UTC(Number(iso[1]), Number(iso[2]) - 1, Number(iso[3])));
  }
  const words = /^(\d{1,2}) ([A-Za-z]+) (\d{4})$/.exec(text.trim());
  if (words) {
    const month = MONTHS.findIndex((m) => m.toLowerCase() === words[2].toLowerCase());
    if (month >= 0) {
      return new Date(Date.UTC(Number(words[3]), month, Number(words[1])));
    }
  }
  return null;
}
