"""Tests of processors/: event processing, the raw consumer and the transactional sender."""
