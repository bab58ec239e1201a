package controller

import (
	"strings"
	"testing"

	"crucible.dev/crucible/internal/profile"
)

// api.proxy_client_ca needs a TLS internal listener: the error names both
// keys, and nothing else is refused.
func TestCheckProxyClientCA(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ca, crt string
		wantErr bool
	}{
		{"client CA on plain HTTP", "/etc/proxy-ca.crt", "", true},
		{"client CA with TLS", "/etc/proxy-ca.crt", "/etc/tls.crt", false},
		{"no client CA", "", "", false},
	} {
		p := profile.Default()
		p.API.ProxyClientCA, p.Controller.InternalTLSCert = tc.ca, tc.crt
		err := checkProxyClientCA(&p)
		switch {
		case tc.wantErr && (err == nil || !strings.Contains(err.Error(), "api.proxy_client_ca") || !strings.Contains(err.Error(), "controller.internal_tls_cert")):
			t.Errorf("%s: %v, want an error naming api.proxy_client_ca and controller.internal_tls_cert", tc.name, err)
		case !tc.wantErr && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		}
	}
}
