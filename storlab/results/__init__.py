"""The results: the store (SQLite in a folder, or a shared PostgreSQL store), its raw data exported as plain files, the files written beside it, one writer per folder."""
