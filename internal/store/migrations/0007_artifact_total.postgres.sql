-- The size of every recorded artifact together, every pod's and every
-- source's: what [ingest] max_total_bytes bounds (store.Quota.MaxTotalBytes).
-- A claim reads one row instead of summing a table that only grows (nothing
-- in crucible deletes artifacts; a SUM over 500,000 rows took ~100 ms on
-- either backend, twice per upload).
--
-- Triggers keep it, in the statement that changes artifacts, so no writer
-- can forget it: the store's inserts and its controller-over-pod updates,
-- and an operator's deletes, cascaded from work_pods or not, and truncates.
-- Every change of artifacts updates this one row, so writers of artifacts
-- queue on its row lock until they commit; a claim that checks the total
-- locks it (SELECT … FOR UPDATE) and reads the latest committed sum, which
-- makes the bound exact across replicas (package store, checkTotal).
CREATE TABLE artifact_total (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    bytes BIGINT  NOT NULL
);

INSERT INTO artifact_total (id, bytes) SELECT 1, COALESCE(SUM(size), 0) FROM artifacts;

CREATE FUNCTION artifact_total_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE artifact_total SET bytes = bytes
        + CASE WHEN TG_OP = 'DELETE' THEN 0 ELSE NEW.size END
        - CASE WHEN TG_OP = 'INSERT' THEN 0 ELSE OLD.size END
        WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER artifact_total_insert AFTER INSERT ON artifacts
    FOR EACH ROW EXECUTE FUNCTION artifact_total_row();
CREATE TRIGGER artifact_total_update AFTER UPDATE OF size ON artifacts
    FOR EACH ROW WHEN (OLD.size <> NEW.size) EXECUTE FUNCTION artifact_total_row();
CREATE TRIGGER artifact_total_delete AFTER DELETE ON artifacts
    FOR EACH ROW EXECUTE FUNCTION artifact_total_row();

CREATE FUNCTION artifact_total_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE artifact_total SET bytes = 0 WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER artifact_total_truncate AFTER TRUNCATE ON artifacts
    FOR EACH STATEMENT EXECUTE FUNCTION artifact_total_truncate();
