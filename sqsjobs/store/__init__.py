"""DynamoDB job store: sans-I/O requests for every transition (``requests``)."""
