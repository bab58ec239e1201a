// Package webhook owns crucible's spoke authn webhook: the TokenReview server a
// spoke kube-apiserver calls (--authentication-token-webhook-config-file) to
// check the hub controller's projected service-account tokens.
//
// Hub and spoke share the service-account issuer string
// (https://kubernetes.default.svc), so the spoke's own authenticator cannot
// tell their tokens apart; the keys can. The webhook therefore checks tokens
// against keys it fetches through a discovery URL (the controller's read-only
// mirror of the hub's /.well-known/openid-configuration and JWKS), never
// through the issuer URL.
//
// What the package owns:
//
//   - the configuration file (Config, ParseConfig, LoadConfig): providers
//     shaped like kube-apiserver's AuthenticationConfiguration jwt entries plus
//     a name and a subject allowlist, strictly decoded and validated with
//     k8s.io/apiserver's own validation;
//   - routing a token to the one provider whose issuer matches its unverified
//     iss claim (route, untrusted);
//   - each provider's key fetch: discovery (issuer byte for byte), JWKS at
//     jwks_uri, its own TLS client (keySet); the cache over it (rate-limited
//     refresh, last good keys, unknown-kid grace) is internal/jwt's KeySet;
//   - authentication by kube-apiserver's JWT authenticator library
//     (k8s.io/apiserver/plugin/pkg/authenticator/token/oidc) with crucible's
//     extra checks: subject allowlist, no system: names, no reserved extra keys;
//   - the HTTP surfaces: Server.Handler for the TLS listener kube-apiserver
//     calls (TokenReview, health; the client certificate is checked by
//     internal/httpserve), Server.MetricsHandler for the operations listener;
//     refusals logged at Debug and summed up at Info (refusals), so forged
//     tokens cannot flood the log; and configuration reload (Reloader).
//
// A review verifies the token's signature once: the library calls the
// provider's key set through recordingKeySet, whose record tells
// "unavailable" from "invalid". Acceptances are cached by the token's
// lru.TokenKey (verifiedCache, an lru.Cache: bounded, never past the
// token's exp nor a minute,
// one cache per configuration so a reload starts empty), for the several
// API servers of one spoke asking about the same token; rejections are
// always decided afresh.
//
// Answers follow kube-apiserver's caching: a definitive "no" is
// authenticated:false (cached by the API server), while unavailable keys
// answer status.error (never cached), so an outage of the hub's mirror does
// not turn into cached denials. So does a key id absent from fresh keys for
// a provider's unknownKeyIDGrace (default 2m) after it is first seen: after
// a hub key rotation the mirror may still serve the old JWKS for its TTL.
package webhook
