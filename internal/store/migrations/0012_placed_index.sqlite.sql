-- The rows the controller placed (placement set), newest first: the
-- replicas' count of placements in flight (api.Server.CountPlacements)
-- reads the last capacity.ReserveTTL of them every second. Every other
-- index walks the live rows to find them: with 10,000 pods held, that
-- was a tenth of an idle controller's CPU. Partial, so a row whose
-- submitter named its cluster costs it nothing.
CREATE INDEX work_pods_placed ON work_pods (created_at DESC, id) WHERE placement <> '';
