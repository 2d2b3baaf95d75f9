"""Integration tests: real local servers reached through the real client stack."""
