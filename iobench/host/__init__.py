"""What is outside the epoch, on this host: bounded work in a watched child, a storage that stalls, the page
cache, the mounts."""
