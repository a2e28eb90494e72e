"""Test support: event-file loaders, fault injection, reference sums."""
