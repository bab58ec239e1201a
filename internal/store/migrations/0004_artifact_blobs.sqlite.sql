-- Artifact bytes (R-C10): with SQLite they stay in the artifacts directory
-- (package artifact's Dir). One SQLite file serves one controller, so a
-- local directory is as shared as the store itself; only PostgreSQL, which
-- several replicas share, keeps the bytes in the database. This step exists
-- so both dialects count the same versions.
SELECT 1;
