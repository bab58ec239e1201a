-- The discovery mirror's last good documents (R-TB1): the hub's OIDC
-- discovery document and JWKS as the hub API sent them, with the time they
-- were fetched, so that a controller that starts while the hub API is
-- unreachable serves them within [mirror] max_stale counted from that
-- fetch, and every replica has them. Public data. A write keeps the newer
-- of two fetches (replicas fetch on their own).
CREATE TABLE mirror_documents (
    name       TEXT   NOT NULL PRIMARY KEY CHECK (name IN ('discovery', 'jwks')),
    body       BYTEA  NOT NULL CHECK (octet_length(body) <= 262144),
    fetched_at BIGINT NOT NULL
);
