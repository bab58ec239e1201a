-- Who wrote each artifact (R-IN7): 'controller' (the tier-1 log and any other
-- controller-owned kind) or 'pod' (an upload through the drop-box). Log
-- collection trusts only a controller-written 'log'.
--
-- Existing rows: 'log' rows become 'controller' and every other row 'pod'.
-- Before this migration the drop-box let a pod upload kind 'log' too, so an
-- old 'log' row may in truth be a pod's; those pods are finished and their
-- logs already collected, and nothing here can tell the two apart.
--
-- The default only fills the existing rows; it is dropped so that a write
-- that forgets the column fails instead of claiming 'pod'.
ALTER TABLE artifacts ADD COLUMN source TEXT NOT NULL DEFAULT 'pod' CHECK (source IN ('controller', 'pod'));
UPDATE artifacts SET source = 'controller' WHERE kind = 'log';
ALTER TABLE artifacts ALTER COLUMN source DROP DEFAULT;
