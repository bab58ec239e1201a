package portforward

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

// When the WebSocket attempt was refused by the API server (a 403 inside an
// upgrade failure, which does not unwrap) and the SPDY fallback then fails
// with text only, the error carries the API server's status, so the relay
// can tell a refusal (RBAC) from an outage.
func TestDialErrorKeepsTheAPIServersStatus(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("no pods/portforward"))
	spdyText := errors.New("unable to upgrade connection: pods \"p\" is forbidden")
	tests := []struct {
		name           string
		final, primary error
		wantForbidden  bool
	}{
		{"primary refused, fallback text", spdyText, &streamhttp.UpgradeFailureError{Cause: forbidden}, true},
		{"final has the status", forbidden, nil, true},
		{"no status anywhere", errors.New("dial tcp: connection refused"), errors.New("dial tcp: connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dialError(tt.final, tt.primary)
			if got := apierrors.IsForbidden(err); got != tt.wantForbidden {
				t.Errorf("IsForbidden(%v) = %v, want %v", err, got, tt.wantForbidden)
			}
			if !errors.Is(err, tt.final) && !tt.wantForbidden {
				t.Errorf("%v does not wrap the dial's error", err)
			}
		})
	}
}
