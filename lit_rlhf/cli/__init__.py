"""The applications built on the library: train.py and evaluate.py (Hydra), sweeps, run directories, the
config resolvers. The library (everything in lit_rlhf outside this package) never imports from here."""
