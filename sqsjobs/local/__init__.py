"""Local runs without AWS: the embedded emulator (moto's server on loopback) and ``sqsjobs dev``."""
