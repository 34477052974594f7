"""The processes around the workers: the Temporal dev server (`dev_server`), one evaluation worker
process per GPU (`gpus`), a scripted OpenAI-compatible model endpoint (`scripted_model`) and the fault
drills that kill and restart them mid-run (`chaos`)."""
