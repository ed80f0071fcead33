"""One run across many clients, on torch.distributed, as a training job reads shared storage (docs/distributed.md):
job.py a rank's membership, epochs.py the dataset handed out and the epochs, launch.py `--ranks P`."""
