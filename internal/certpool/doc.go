// Package certpool owns the one way crucible turns a PEM CA bundle into an
// x509.CertPool: from a file (the CLI's --ca-file, a listener's client CA,
// the dev stack's CA) or from configuration text (the webhook's
// certificateAuthority), refusing a bundle in which no certificate parses
// with an error that names where it came from.
package certpool
