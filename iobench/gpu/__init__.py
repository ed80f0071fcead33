"""The GPUs: their rates and where each comes from, measuring one (`gpu-rate`), and the consumers that emulate
them in a training run."""
