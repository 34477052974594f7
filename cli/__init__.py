"""The `marathon` command's parts: a module per sub-command (eval, run and follow, suite, dev, report and
runs, schedule), the shared flags and their checks (args), the tables it prints (tables) and the waiting
for a Temporal server that restarts (server). marathon.py puts the parser together."""
