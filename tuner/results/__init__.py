"""What trials leave in the storage and everything that reads it back: report, export, studies."""
