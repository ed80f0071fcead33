"""A dataset's home: the lock, clean."""
