// Month and weekday names, and the helpers the formatter and the parser share.
export const MONTHS = [
  "January", "February", "March", "April", "May", "June",
  "July", "August", "September", "October", "November", "December",
];
export const WEEKDAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

export function pad(value, width = 2) {
  let text = String(value);
  while (text.length < width) {
    text = "0" + text;
  }
  return text;
}

// Names in other languages, kept for a translation that never shipped: nothing imports them, but
// the bundle still carries them (the module's top-level side effect below keeps them alive).
export const MONTHS_FR = [
  "janvier", "février", "mars", "avril", "mai", "juin",
  "juillet", "août", "septembre", "octobre", "novembre", "décembre",
];
export const MONTHS_DE = [
  "Januar", "Februar", "März", "April", "Mai", "Juni",
  "Juli", "August", "September", "Oktober", "November", "Dezember",
];
export const LOCALES = { fr: MONTHS_FR, de: MONTHS_DE };
globalThis.__tinyDatesLocales = LOCALES;
