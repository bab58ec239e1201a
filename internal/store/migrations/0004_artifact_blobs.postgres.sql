-- Artifact bytes in the database (R-C10, R-IN6): with PostgreSQL every
-- replica serves every artifact, so the bytes cannot live on one replica's
-- disk. A blob is one content of one (pod, kind), staged chunk by chunk
-- while sha256 is NULL and committed by setting its sha256, which makes
-- (pod_id, kind, sha256) its content address: an address holds one content,
-- and committing never rewrites a chunk. The artifacts row stays the claim;
-- a blob no row names is a lost claim's, which its writer removes.
-- touched_at (unix ns) is bumped with every chunk, so a replica's start can
-- drop what a crash left staged without touching a live upload elsewhere.
CREATE TABLE artifact_blobs (
    id         BIGSERIAL PRIMARY KEY,
    pod_id     TEXT COLLATE "C" NOT NULL,
    kind       TEXT COLLATE "C" NOT NULL,
    sha256     TEXT COLLATE "C",
    size       BIGINT NOT NULL DEFAULT 0,
    touched_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX artifact_blobs_address ON artifact_blobs (pod_id, kind, sha256) WHERE sha256 IS NOT NULL;
CREATE INDEX artifact_blobs_staged ON artifact_blobs (touched_at) WHERE sha256 IS NULL;

-- Chunks of at most 1 MiB, read one at a time so no artifact is ever whole
-- in memory. EXTERNAL storage: out of line and not compressed, since most
-- artifacts (archives, logs already gzipped by tools) do not compress and
-- reading a chunk then costs no decompression.
CREATE TABLE artifact_chunks (
    blob_id BIGINT  NOT NULL REFERENCES artifact_blobs (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    data    BYTEA   NOT NULL,
    PRIMARY KEY (blob_id, seq)
);
ALTER TABLE artifact_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
