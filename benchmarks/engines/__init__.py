"""Rollout engines: the torch sampler (HF loop or static-cache decoder), vLLM, teacher-forced passes."""
