-- The installation's digest key: the HMAC-SHA256 key under which the rows
-- keep digests of values they must not hold (the secret files of a spec,
-- the request of an idempotency key), so that a digest cannot be guessed
-- offline from a copy of the store, as a bare SHA-256 of a short secret
-- can. One row, made by the first reader (store.DigestKey inserts a random
-- key if there is none, then reads what is there, so replicas racing the
-- first read agree on one key). Never changed: a new key would make every
-- keyed digest in the rows unmatchable.
CREATE TABLE digest_key (
    id  SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    key BYTEA    NOT NULL CHECK (octet_length(key) = 32)
);
