"""Evaluation: greedy accuracy, avg@k and pass@k per task, natively or through lm-eval; ``sppo-bench eval``."""
