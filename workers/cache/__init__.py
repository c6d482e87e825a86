"""Result caches of a worker: exact (in-process LRU + Redis) and semantic (FAISS + compacted topic)."""
