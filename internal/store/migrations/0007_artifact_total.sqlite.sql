-- The size of every recorded artifact together, every pod's and every
-- source's: what [ingest] max_total_bytes bounds (store.Quota.MaxTotalBytes).
-- A claim reads one row instead of summing a table that only grows (nothing
-- in crucible deletes artifacts; a SUM over 500,000 rows took ~100 ms on
-- either backend, twice per upload, with SQLite's one writer held).
--
-- Triggers keep it, in the statement that changes artifacts, so no writer
-- can forget it: the store's inserts and its controller-over-pod updates,
-- and an operator's deletes, cascaded from work_pods or not.
CREATE TABLE artifact_total (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    bytes INTEGER NOT NULL
) STRICT;

INSERT INTO artifact_total (id, bytes) SELECT 1, COALESCE(SUM(size), 0) FROM artifacts;

CREATE TRIGGER artifact_total_insert AFTER INSERT ON artifacts
BEGIN
    UPDATE artifact_total SET bytes = bytes + NEW.size WHERE id = 1;
END;

CREATE TRIGGER artifact_total_update AFTER UPDATE OF size ON artifacts
BEGIN
    UPDATE artifact_total SET bytes = bytes - OLD.size + NEW.size WHERE id = 1;
END;

CREATE TRIGGER artifact_total_delete AFTER DELETE ON artifacts
BEGIN
    UPDATE artifact_total SET bytes = bytes - OLD.size WHERE id = 1;
END;
