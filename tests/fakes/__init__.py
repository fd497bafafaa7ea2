"""In-process fakes of external services for fast tests."""
