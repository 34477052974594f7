"""The morning after a run: its report (reports/collect.py gathers the facts, reports/render.py writes the
folder), the list of what ran (reports/runs.py), and the local state directory's servers (reports/local.py)."""
