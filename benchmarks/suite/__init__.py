"""Suites: one validated plan, then every (algorithm, seed) run, in this process or in workers."""
