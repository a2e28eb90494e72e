"""Lambda entry points: thin, one per event source."""
