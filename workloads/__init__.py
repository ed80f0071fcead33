"""Shipped workload definitions (TOML), installed as `iobench.workloads`; read them with iobench.workload."""
