-- Idempotency keys of POST /api/pods: a client that heard nothing back (the
-- controller was killed mid-submit) sends the same request again with the
-- same Idempotency-Key and gets the row the first request made instead of a
-- second pod. A key is the submitter's own: unique per (submitter, key), so
-- one user cannot reach another's row by guessing keys, and the unique
-- index is what makes two replicas racing one key create one row.
-- request_sha256 is the SHA-256 of the request's canonical JSON, so a key
-- reused with a different request is refused rather than replayed. Rows
-- without a key (and rows from before) have a NULL key and are not indexed.
ALTER TABLE work_pods ADD COLUMN idempotency_key TEXT COLLATE "C";
ALTER TABLE work_pods ADD COLUMN request_sha256 TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX work_pods_idempotency ON work_pods (submitter, idempotency_key) WHERE idempotency_key IS NOT NULL;
