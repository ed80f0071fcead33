"""What an epoch fills: its recorder (per-sample figures in numpy arrays), the system counters, latency
summaries and histograms, and the order it reads in."""
