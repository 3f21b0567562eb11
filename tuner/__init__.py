"""Optuna-driven auto-tuner for SGLang launch parameters."""

__version__ = "0.1.0"
