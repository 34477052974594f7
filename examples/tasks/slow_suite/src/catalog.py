"""A small catalogue of product codes: normalising, de-duplicating and grouping them."""

# How `unique_codes` remembers the codes it has seen: "list" or "set".
SEEN_AS = "list"


def normalise(code: str) -> str:
    return code.strip().upper().replace(" ", "-")


def unique_codes(codes):
    """The distinct normalised codes, in the order they first appear."""
    seen = set() if SEEN_AS == "set" else []
    out = []
    for code in codes:
        key = normalise(code)
        if key not in seen:
            if SEEN_AS == "set":
                seen.add(key)
            else:
                seen.append(key)
            out.append(key)
    return out


def by_prefix(codes, width: int = 2):
    """Distinct codes grouped by their first `width` characters."""
    groups = {}
    for code in unique_codes(codes):
        groups.setdefault(code[:width], []).append(code)
    return groups
