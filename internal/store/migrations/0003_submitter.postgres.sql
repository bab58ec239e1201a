-- Who submitted each work pod (R-C12): the API caller's identity (the hub
-- user name with auth "kubernetes", the proxy's user with "proxy",
-- crucible:anonymous with "none"). Rows from before are ''. The column is
-- written once, at create.
ALTER TABLE work_pods ADD COLUMN submitter TEXT NOT NULL DEFAULT '';
