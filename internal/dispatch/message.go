package dispatch

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"crucible.dev/crucible/internal/httperr"
)

// maxMessageBytes bounds the spoke's own text quoted in a public message.
const maxMessageBytes = 1000

// PublicMessage is what a client sees of a failed call to a spoke, in an
// answer or in a row's reason. A spoke API server's own status message is
// public to whoever may submit (it names a missing RBAC verb and resource,
// which the platform engineer fixing RBAC needs); any other error text
// (addresses, TLS and transport detail, wrapped causes) stays in the log and
// the client gets a fixed phrase.
func PublicMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if msg := status.Status().Message; msg != "" {
			if apierrors.IsForbidden(err) {
				return "the spoke denied it (check the RBAC of `crucible render spoke`): " + httperr.Truncate(msg, maxMessageBytes)
			}
			return "the spoke answered: " + httperr.Truncate(msg, maxMessageBytes)
		}
	}
	switch {
	case errors.Is(err, ErrNotOurs):
		return "an object with the work pod's name exists on the spoke and is not this work pod's"
	case errors.Is(err, ErrUnknownCluster):
		return "the cluster is not in the controller's profile"
	case errors.Is(err, context.DeadlineExceeded):
		return "the spoke did not answer in time"
	}
	return "the call to the spoke failed (the controller's log has the cause)"
}
