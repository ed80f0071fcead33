"""The phases of a measured run: the pipeline over one RunContext, the one runner, the one epoch, metadata, fio and the
mitigations."""
