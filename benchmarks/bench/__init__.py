"""``sppo-bench bench``: engine and trainer speed against the CPU's ceiling, HF and TRL, by section."""
