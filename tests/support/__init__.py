"""Test tooling: start the simulator as a subprocess and drive load against it."""
