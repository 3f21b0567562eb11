"""The inference engines the tuner launches: flags per version, start-up rules, log parsing."""
