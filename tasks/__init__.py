"""Tasks: any measurable target that is not a kernel (a test suite's time, a bundle's size, a flaky
test's failure rate), given as a folder with task.toml. spec.py reads the folder into a bundle that
travels by value; document.py is a candidate as one text (and best.patch); fence.py runs a command
confined; measure.py judges a candidate against the task's own files in the same call; tunables.py
gives the model-free tuner the task's knobs. No Temporal and no torch here."""
