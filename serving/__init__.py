"""The processes around the workers: the Temporal dev server (`dev_server`) and one evaluation worker
process per GPU (`gpus`)."""
