"""The archive: finished records kept in S3 after the table's TTL removes them (docs/archive.md)."""
