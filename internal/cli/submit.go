package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/workpod"
)

func newSubmitCmd() *cobra.Command {
	var (
		server, cluster, image, kind, key string
		placement                         string
		clusters, env                     []string
		files                             map[string]string
		wait, follow                      bool
		cf                                classFlags
	)
	cmd := &cobra.Command{
		Use:   "submit --image IMAGE [--cluster C | --cluster auto | --clusters A,B] -- COMMAND [ARGS...]",
		Short: "Submit a work pod to a spoke and print its id",
		Long: `submit asks the controller to run a work pod on a spoke cluster (the profile's
default unless --cluster). It prints the work pod's id, which is also the pod's
name on the spoke. With --wait it waits until the pod finished and exits non-zero
unless it succeeded; --follow also prints its log live meanwhile (as logs -f;
Ctrl-C stops following, exit 130, and leaves the pod running).

--cluster auto lets the controller choose the spoke (also what an omitted
--cluster means where the profile says default_cluster = "auto"); --clusters
a,b chooses among those, in that order of preference. It picks a spoke where the
class is offered, you may create pods, the spoke is healthy and, where the
controller watches the spoke's capacity, a node takes the pod now, the one with
the most free of the pod's scarcest resource first. When nothing fits now the pod
waits on the spoke with the most capacity for it, unless --placement strict,
which refuses (409) with every spoke's reason. crucible pods get ID shows the
decision; crucible capacity shows what is free where.

Every submit carries an Idempotency-Key (a fresh random one, or --idempotency-key).
When the controller could not be reached or its answer was lost (a connection
error, 503, or a 502/504 from something in between), submit sends the same
request again with the same key, a few times with backoff: a controller restart
during the submit then answers the work pod it already made instead of making a
second one.

The pod's class (--class, else the kind's default) gives it its resources,
placement and deadline; --gpus, --cpu, --memory, --resource and --deadline
change them within the class's bounds (crucible classes lists them), and a
value out of bounds is refused (422) naming the flag's field and the bound.`,
		Example: `  crucible submit --image busybox -- sh -c 'echo hello'
  crucible submit --class gpu --gpus 2 --memory 32Gi --deadline 6h --image ghcr.io/example/train:1 -- python train.py
  crucible submit --cluster dock --image busybox --env MODE=fast --file input.txt=./input.txt -- ./run.sh
  crucible submit --cluster auto --class gpu --gpus 4 --placement strict --image ghcr.io/example/train:1 -- python train.py
  crucible submit --clusters dock,wharf --class gpu --image ghcr.io/example/eval:1 -- ./eval.sh
  crucible submit --idempotency-key nightly-2026-11-30 --image busybox -- ./nightly.sh`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ask := cf.ask(cmd)
			req := apiv1.SubmitRequest{Kind: kind, Cluster: cluster, Clusters: clusters, Placement: placement, Image: image,
				Class: cf.class, GPUs: ask.GPUs, Resources: ask.Resources, Deadline: ask.Deadline}
			if errs := apiv1.CheckPlacement(req); len(errs) > 0 {
				// Field paths are the flags' names (--cluster, --clusters,
				// --placement).
				return fmt.Errorf("placement flags: %w", errs.ToAggregate())
			}
			if len(args) > 0 {
				req.Command = args
			}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--env %q: want NAME=VALUE", kv)
				}
				req.Env = append(req.Env, workpod.EnvVar{Name: k, Value: v})
			}
			for name, path := range files {
				data, err := os.ReadFile(path)
				if err != nil {
					return fmt.Errorf("--file %s=%s: %w", name, path, err)
				}
				if req.Files == nil {
					req.Files = map[string]string{}
				}
				req.Files[name] = string(data)
			}
			if !cmd.Flags().Changed("idempotency-key") {
				key = newIdempotencyKey()
			} else if err := apiv1.CheckIdempotencyKey(key); err != nil {
				return fmt.Errorf("--idempotency-key: %w", err)
			}
			c := newAPIClient(server)
			wp, err := c.submit(cmd.Context(), req, key, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), wp.ID)
			if follow {
				end, err := followLog(cmd.Context(), c, wp.ID, cmd.OutOrStdout(), cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				return endError(wp.ID, end, cmd.ErrOrStderr())
			}
			if !wait {
				return nil
			}
			return waitFinished(cmd.Context(), c, wp.ID, cmd.ErrOrStderr())
		},
	}
	addServerFlag(cmd, &server)
	cf.add(cmd)
	cmd.Flags().StringVar(&image, "image", "", "container image (required)")
	cmd.Flags().StringVar(&cluster, "cluster", "", `spoke to run on, or "auto" to let the controller choose (default: the profile's default_cluster)`)
	cmd.Flags().StringSliceVar(&clusters, "clusters", nil, "let the controller choose among these spokes, in this order of preference (comma-separated)")
	cmd.Flags().StringVar(&placement, "placement", "", `"strict": with --cluster auto or --clusters, refuse (409) when no spoke fits the pod now instead of letting it wait`)
	cmd.Flags().StringVar(&kind, "kind", "turn", "work pod kind: turn or loop")
	cmd.Flags().StringArrayVar(&env, "env", nil, "environment variable NAME=VALUE (repeatable)")
	cmd.Flags().StringToStringVar(&files, "file", nil, "KEY=PATH: put the file's content into the pod at /etc/crucible/files/KEY (repeatable)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the work pod finished; exit non-zero unless it succeeded")
	cmd.Flags().BoolVar(&follow, "follow", false, "print the pod's log live until it finished (implies --wait)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "the submit's Idempotency-Key (default: a fresh random one): the same key with the same request answers the work pod it made before instead of a new one")
	_ = cmd.MarkFlagRequired("image")
	return cmd
}

// newIdempotencyKey is a fresh key for one submit: 128 random bits.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "cli-" + hex.EncodeToString(b)
}

// submitRetry bounds the resends of one submit: waits double from
// submitRetryInitial up to submitRetryMax (a Retry-After the controller
// sends is honoured up to that), for at most submitAttempts sends — about
// half a minute, enough for a controller restart.
const (
	submitAttempts     = 8
	submitRetryInitial = 250 * time.Millisecond
	submitRetryMax     = 8 * time.Second
)

// errNoAnswer marks a send that got no verdict from the controller.
var errNoAnswer = errors.New("no answer from the controller")

// submit posts req with idempotency key key until the controller answers:
// a send that got no verdict is sent again with the same key, which makes
// a resend safe (the controller answers the row the first send made, if it
// made one). A replayed answer is noted on progress.
func (c *apiClient) submit(ctx context.Context, req apiv1.SubmitRequest, key string, progress io.Writer) (apiv1.WorkPod, error) {
	if c.err != nil {
		return apiv1.WorkPod{}, c.err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return apiv1.WorkPod{}, err
	}
	wait := submitRetryInitial
	for attempt := 1; ; attempt++ {
		wp, replayed, retryAfter, err := c.submitOnce(ctx, body, key)
		if err == nil {
			if replayed {
				fmt.Fprintf(progress, "%s: the controller had made it already (Idempotency-Key %s); not submitted again\n", wp.ID, key)
			}
			return wp, nil
		}
		if !errors.Is(err, errNoAnswer) || attempt == submitAttempts || ctx.Err() != nil {
			return apiv1.WorkPod{}, err
		}
		if retryAfter > 0 {
			wait = min(retryAfter, submitRetryMax)
		}
		fmt.Fprintf(progress, "%v; sending the submit again with the same Idempotency-Key in %s (attempt %d of %d)\n", err, wait, attempt+1, submitAttempts)
		select {
		case <-ctx.Done():
			return apiv1.WorkPod{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, submitRetryMax)
	}
}

// submitOnce sends one POST /api/pods. An error wrapping errNoAnswer means
// the request may or may not have made a row: a transport error, a 503, or
// a 502/504 that is not the controller's own JSON error (a proxy's).
func (c *apiClient) submitOnce(ctx context.Context, body []byte, key string) (apiv1.WorkPod, bool, time.Duration, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.server+"/api/pods", bytes.NewReader(body))
	if err != nil {
		return apiv1.WorkPod{}, false, 0, err
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(apiv1.ClientHeader, "crucible-cli")
	r.Header.Set(apiv1.IdempotencyKeyHeader, key)
	resp, err := c.http.Do(r)
	if err != nil {
		if ctx.Err() != nil {
			return apiv1.WorkPod{}, false, 0, ctx.Err()
		}
		return apiv1.WorkPod{}, false, 0, fmt.Errorf("controller API at %s: %w: %w", c.server, errNoAnswer, err)
	}
	defer resp.Body.Close()
	if err := redirectError(c.server, resp); err != nil {
		return apiv1.WorkPod{}, false, 0, err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return apiv1.WorkPod{}, false, 0, fmt.Errorf("controller API at %s: %w: reading the answer: %w", c.server, errNoAnswer, err)
	}
	if resp.StatusCode == http.StatusCreated {
		var wp apiv1.WorkPod
		if err := json.Unmarshal(data, &wp); err != nil {
			return apiv1.WorkPod{}, false, 0, fmt.Errorf("controller API at %s: the answer is no work pod: %w", c.server, err)
		}
		return wp, resp.Header.Get(apiv1.ReplayedHeader) == "true", 0, nil
	}
	msg, answered := controllerError(resp, data)
	err = fmt.Errorf("%s (HTTP %d)", msg, resp.StatusCode)
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable,
		(resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout) && !answered:
		after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return apiv1.WorkPod{}, false, time.Duration(max(after, 0)) * time.Second, fmt.Errorf("%w: %w", errNoAnswer, err)
	}
	return apiv1.WorkPod{}, false, 0, err
}

// controllerError returns an error answer's message and whether it is the
// controller's own (a JSON {"error": …}), not a proxy's page.
func controllerError(resp *http.Response, data []byte) (string, bool) {
	var e struct{ Error string }
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/json" && json.Unmarshal(data, &e) == nil && e.Error != "" {
		return e.Error, true
	}
	return fmt.Sprintf("controller answered %s: %s", resp.Status, httperr.Truncate(string(bytes.TrimSpace(data)), 200)), false
}
