"""Real services (a Kafka broker, ...) that tests and benchmarks start on loopback."""
