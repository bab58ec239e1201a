package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
)

// sampleScript is the sample turn of `dev up --sample` (make dev): it prints
// lines over a few seconds, writes a result and pushes it to the drop-box
// with the pod's own projected token, as real work would.
const sampleScript = `echo "sample: a crucible turn running as pod $HOSTNAME"
for i in 1 2 3 4 5; do echo "sample: step $i of 5"; sleep 1; done
printf '{"pod": "%s", "steps": 5}\n' "$CRUCIBLE_WORK_POD" > result.json
crucible push result result.json
echo "sample: done"`

// sampleSettle bounds waiting for the finished sample's log to be collected.
const sampleSettle = time.Minute

// runSample shows the whole loop once: a turn submitted through the API runs
// where the stack's profile places it (default_cluster "auto"), its log is followed live (SSE), and once it ended its
// state, collected log and artifacts (the log and the pushed result) come
// back from the hub.
func runSample(cmd *cobra.Command, stack *devstack.Stack) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	c := newAPIClient(stack.Federation.ControllerInternalURL)
	// The same submit as `crucible submit`: one idempotency key, resent on
	// no answer (a controller still starting) without making two turns.
	req := apiv1.SubmitRequest{Image: "busybox", Command: []string{"sh", "-c", sampleScript}}
	wp, err := c.submit(ctx, req, newIdempotencyKey(), cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nsample turn %s submitted to %s; its log, live:\n", wp.ID, wp.Cluster)
	end, err := followLog(ctx, c, wp.ID, out, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := endError(wp.ID, end, out); err != nil {
		return err
	}
	if err := waitLogCollected(ctx, c, wp.ID); err != nil {
		return err
	}
	fmt.Fprintf(out, "\ncollected log of %s:\n", wp.ID)
	if err := c.do(ctx, http.MethodGet, "/api/pods/"+url.PathEscape(wp.ID)+"/artifacts/log", nil, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nartifacts of %s:\n", wp.ID)
	if err := printArtifacts(ctx, c, wp.ID, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nAPI: %s (try: crucible pods list --server %s)\n", stack.Federation.ControllerInternalURL, stack.Federation.ControllerInternalURL)
	return nil
}

// waitLogCollected waits until the hub stored the finished pod's log.
func waitLogCollected(ctx context.Context, c *apiClient, id string) error {
	deadline := time.Now().Add(sampleSettle)
	for {
		var wp apiv1.WorkPod
		if err := c.do(ctx, http.MethodGet, "/api/pods/"+url.PathEscape(id), nil, &wp); err != nil {
			return err
		}
		if wp.LogCollected {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("log of %s not collected within %s", id, sampleSettle)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
