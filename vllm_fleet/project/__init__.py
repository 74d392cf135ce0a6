"""The checkout and its files: where the non-Python parts live, content hashes for change detection, tables on
stdout. No domain knowledge."""
