-- Work pods and their artifacts (R-C2). Times are unix nanoseconds (UTC), the
-- same representation as on SQLite, so both backends round-trip exactly.
-- Text keys use the "C" collation so that ordering by id or kind is bytewise,
-- as on SQLite, whatever locale the database was created with.
CREATE TABLE work_pods (
    id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    cluster       TEXT COLLATE "C" NOT NULL,
    namespace     TEXT    NOT NULL,
    kind          TEXT COLLATE "C" NOT NULL,
    state         TEXT    NOT NULL,
    pod_uid       TEXT    NOT NULL DEFAULT '',
    spec          BYTEA   NOT NULL,
    exit_code     INTEGER,
    reason        TEXT    NOT NULL DEFAULT '',
    log_collected BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    BIGINT  NOT NULL,
    updated_at    BIGINT  NOT NULL,
    finished_at   BIGINT
);

-- Startup reconcile and the sweep read a cluster's rows by state; the API
-- lists by state across clusters and pages newest first.
CREATE INDEX work_pods_cluster_state ON work_pods (cluster, state);
CREATE INDEX work_pods_state ON work_pods (state);
CREATE INDEX work_pods_created ON work_pods (created_at DESC, id);

CREATE TABLE artifacts (
    pod_id     TEXT COLLATE "C" NOT NULL REFERENCES work_pods (id) ON DELETE CASCADE,
    kind       TEXT COLLATE "C" NOT NULL,
    size       BIGINT NOT NULL,
    sha256     TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (pod_id, kind)
);
