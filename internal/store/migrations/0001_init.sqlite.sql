-- Work pods and their artifacts (R-C2). Times are unix nanoseconds (UTC), the
-- same representation as on PostgreSQL, so both backends round-trip exactly.
-- STRICT makes SQLite reject values of the wrong type instead of coercing.
CREATE TABLE work_pods (
    id            TEXT    NOT NULL PRIMARY KEY,
    cluster       TEXT    NOT NULL,
    namespace     TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    pod_uid       TEXT    NOT NULL DEFAULT '',
    spec          BLOB    NOT NULL,
    exit_code     INTEGER,
    reason        TEXT    NOT NULL DEFAULT '',
    log_collected INTEGER NOT NULL DEFAULT 0 CHECK (log_collected IN (0, 1)),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    finished_at   INTEGER
) STRICT;

-- Startup reconcile and the sweep read a cluster's rows by state; the API
-- lists by state across clusters and pages newest first.
CREATE INDEX work_pods_cluster_state ON work_pods (cluster, state);
CREATE INDEX work_pods_state ON work_pods (state);
CREATE INDEX work_pods_created ON work_pods (created_at DESC, id);

CREATE TABLE artifacts (
    pod_id     TEXT    NOT NULL REFERENCES work_pods (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL,
    size       INTEGER NOT NULL,
    sha256     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (pod_id, kind)
) STRICT;
