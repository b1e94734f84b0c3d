"""MPI transport: tags, message kinds, serialization and the comm loop helpers."""
