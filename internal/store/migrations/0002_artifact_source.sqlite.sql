-- Who wrote each artifact (R-IN7): 'controller' (the tier-1 log and any other
-- controller-owned kind) or 'pod' (an upload through the drop-box). Log
-- collection trusts only a controller-written 'log'.
--
-- Existing rows: 'log' rows become 'controller' and every other row 'pod'.
-- Before this migration the drop-box let a pod upload kind 'log' too, so an
-- old 'log' row may in truth be a pod's; those pods are finished and their
-- logs already collected, and nothing here can tell the two apart.
--
-- SQLite cannot drop a column default later; the store always writes the
-- column, and the CHECK keeps it to the two values.
ALTER TABLE artifacts ADD COLUMN source TEXT NOT NULL DEFAULT 'pod' CHECK (source IN ('controller', 'pod'));
UPDATE artifacts SET source = 'controller' WHERE kind = 'log';
