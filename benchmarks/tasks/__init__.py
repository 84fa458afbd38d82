"""Tasks: problems, prompts and graders (``arith`` generated in code; real datasets from JSONL)."""
