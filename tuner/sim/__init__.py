"""The simulated SGLang server (``python -m tuner.sim``) and its oracle.

A separate program: it imports only its own package. The tuner may import
``tuner.sim.oracle`` and ``tuner.sim.memory``; importing this package starts nothing.
"""
