-- The latest epoch claimed for each spoke: the owner of its reconcile loops
-- (one replica at a time, chosen by a Lease per spoke on the hub) writes its
-- rows under a fence (store.WithFence) carrying the Lease's epoch. A fenced
-- write reads its own epoch here (raising it first when it is higher than
-- the spoke's) and is refused when a higher one is here, so a replica that
-- paused while another took its spoke over cannot overwrite the new
-- owner's writes when it wakes.
-- A fenced write holds the spoke's row FOR SHARE until it commits, and a
-- raise waits for those locks: no write of an older epoch commits after a
-- newer epoch's claim. Rows are never deleted: an epoch, once claimed,
-- fences off all below it.
CREATE TABLE spoke_epochs (
    cluster TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    epoch   BIGINT NOT NULL CHECK (epoch >= 0)
);
