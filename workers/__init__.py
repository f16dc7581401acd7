"""The reference Celery app used by the quick start, docker-compose.yml and the tests."""
