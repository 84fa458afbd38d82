"""Training: the native RL trainer, its config, checkpoints, the models and the supervised warm start."""
