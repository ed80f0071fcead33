"""The answer: the rules (validity, what a run measures, the storage figure), the single-client and the
distributed verdicts, plan and scaling."""
