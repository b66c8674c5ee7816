"""DynamoDB job store, sans-I/O: ``requests`` (every transition), ``codec`` (the item format), ``schema`` (table, indexes, sweeper reads)."""
