"""Checkpointing: files written atomically (files), read weights-only with one-line refusals (loading), sharded
checkpoints of trainer=fsdp2 (sharded), the state an RLHF module saves and checks on resume (state, resume_checks,
run_identity), and the code a checkpoint's saved settings may name (targets)."""
