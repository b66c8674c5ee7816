"""Per-type hooks: a job type that runs once when a job of another type dies or succeeds."""
