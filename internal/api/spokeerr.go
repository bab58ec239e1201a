package api

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"crucible.dev/crucible/internal/dispatch"
)

// maxMessageBytes bounds a public message that quotes upstream or
// validation text.
const maxMessageBytes = 1000

// spokeMessage is what a client sees of a failed call to a spoke. A spoke
// API server's own status message is public to whoever may submit (it names
// a missing RBAC verb and resource, which the platform engineer fixing RBAC
// needs); any other error text (addresses, TLS and transport detail, wrapped
// causes) stays in the log and the client gets a fixed phrase.
func spokeMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if msg := status.Status().Message; msg != "" {
			if apierrors.IsForbidden(err) {
				return "the spoke denied it (check the RBAC of `crucible render spoke`): " + truncate(msg, maxMessageBytes)
			}
			return "the spoke answered: " + truncate(msg, maxMessageBytes)
		}
	}
	switch {
	case errors.Is(err, dispatch.ErrNotOurs):
		return "an object with the work pod's name exists on the spoke and is not this work pod's"
	case errors.Is(err, dispatch.ErrUnknownCluster):
		return "the cluster is not in the controller's profile"
	case errors.Is(err, context.DeadlineExceeded):
		return "the spoke did not answer in time"
	}
	return "the call to the spoke failed (the controller's log has the cause)"
}
