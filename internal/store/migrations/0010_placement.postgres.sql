-- How the controller chose a row's cluster when the submitter let it (cluster
-- "auto" or a preference list): JSON of store.Placement, with every spoke's
-- reason at the time, kept so that the submitter can read why the pod went
-- where it went. '' for a row whose submitter named its cluster, and for
-- rows from before. Set at create.
ALTER TABLE work_pods ADD COLUMN placement TEXT NOT NULL DEFAULT '';
