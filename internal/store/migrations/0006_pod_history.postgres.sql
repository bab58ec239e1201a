-- A work pod's history (R-P2): every state change with its time and reason,
-- and the moments of its start that are no state (scheduled on a node, image
-- pulled, container started) and why it waited, as its spoke said.
--
-- State changes are recorded by triggers, in the statement that changes the
-- state: no writer of a row can forget one, and the entry commits or rolls
-- back with the change. The store's ObservePod writes the other entries,
-- holding the row's lock (SELECT … FOR UPDATE) as every state change does,
-- so seq is the row's own counter (MAX + 1) without a race between replicas.
--
-- A pod keeps at most 100 entries (store.MaxHistory): its first, and the
-- latest 99. Rows from before this step start their history with their next
-- change.
--
-- On work_pods: the node the pod was scheduled on, the latest start moment
-- recorded ('' none, 'scheduled', 'pulled', 'started'), and why the live pod
-- waits now (reason '' and since NULL: nothing holds it).
ALTER TABLE work_pods ADD COLUMN node TEXT NOT NULL DEFAULT '';
ALTER TABLE work_pods ADD COLUMN progress TEXT NOT NULL DEFAULT '' CHECK (progress IN ('', 'scheduled', 'pulled', 'started'));
ALTER TABLE work_pods ADD COLUMN waiting_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE work_pods ADD COLUMN waiting_message TEXT NOT NULL DEFAULT '';
ALTER TABLE work_pods ADD COLUMN waiting_since BIGINT;

CREATE TABLE pod_history (
    pod_id      TEXT COLLATE "C" NOT NULL REFERENCES work_pods (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    occurred_at BIGINT  NOT NULL,
    event       TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    message     TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (pod_id, seq)
);

-- A reason is the change's own: a state change that left the row's reason
-- as it was records none.
CREATE FUNCTION work_pods_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pod_history (pod_id, seq, occurred_at, event, state, reason)
    SELECT NEW.id, COALESCE(MAX(seq), 0) + 1, NEW.updated_at, 'state', NEW.state,
           CASE WHEN TG_OP = 'INSERT' OR NEW.reason <> OLD.reason THEN NEW.reason ELSE '' END
    FROM pod_history WHERE pod_id = NEW.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER work_pods_history_created AFTER INSERT ON work_pods
    FOR EACH ROW EXECUTE FUNCTION work_pods_history();
CREATE TRIGGER work_pods_history_state AFTER UPDATE OF state ON work_pods
    FOR EACH ROW WHEN (OLD.state <> NEW.state) EXECUTE FUNCTION work_pods_history();

CREATE FUNCTION pod_history_bound() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pod_history WHERE pod_id = NEW.pod_id AND seq > 1 AND seq <= NEW.seq - 99;
    RETURN NULL;
END
$$;

CREATE TRIGGER pod_history_bound AFTER INSERT ON pod_history
    FOR EACH ROW EXECUTE FUNCTION pod_history_bound();
