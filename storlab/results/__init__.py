"""The results: the store (SQLite in a folder, or a shared PostgreSQL store), the files written beside it, one writer per folder."""
