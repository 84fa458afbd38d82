"""Telemetry: metric names (the schema analysis reads), the compute meter and budgets, MLflow tracking."""
