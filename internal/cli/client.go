package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/api/apiv1"
)

// apiClient talks to the controller's internal listener.
type apiClient struct {
	server string
	http   *http.Client
	// stream is http without the overall timeout, for SSE: a watch or a
	// followed log lasts as long as it lasts.
	stream *http.Client
	// err is why nothing may be sent (a server or credentials problem),
	// reported by the first request.
	err error
}

// insecureHTTPFlag lets credentials go over plain http to a host that is
// not loopback (checkTarget).
const insecureHTTPFlag = "insecure-send-credentials-over-http"

func addServerFlag(cmd *cobra.Command, server *string) {
	f := cmd.Flags()
	f.StringVar(server, "server", "", "controller API URL (default: --dev's, else $CRUCIBLE_API, else "+fallbackServer+")")
	f.StringVar(&devDir, "dev", "", "use the controller of the dev stack in DIR (CRUCIBLE_API in DIR/env); --dev alone is "+defaultDevDir+", another directory needs the =: --dev=DIR")
	f.Lookup("dev").NoOptDefVal = defaultDevDir
	addCredentialFlags(cmd)
}

// newAPIClient resolves the controller (resolveServer) and the credentials,
// and refuses, before anything is dialled, to send them anywhere but over
// https or to a loopback host. Redirects are never followed.
func newAPIClient(server string) *apiClient {
	server, source, err := resolveServer(server, os.Getenv("CRUCIBLE_API"), devDir)
	var rt http.RoundTripper
	if err == nil {
		var sends bool
		rt, sends, err = credentials.transport(http.DefaultTransport)
		if err == nil {
			err = checkTarget(server, source, sends, credentials.overPlainHTTP)
		}
	}
	if err != nil {
		rt = refusingTransport{err}
	}
	return &apiClient{
		server: strings.TrimRight(server, "/"),
		http:   &http.Client{Timeout: 5 * time.Minute, Transport: rt, CheckRedirect: refuseRedirect},
		stream: &http.Client{Transport: rt, CheckRedirect: refuseRedirect},
		err:    err,
	}
}

// do sends a request and decodes a JSON answer into out; an error answer
// becomes an error carrying the controller's message.
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	_, err := c.doHeader(ctx, method, path, body, out)
	return err
}

// doHeader is do that also returns the answer's headers.
func (c *apiClient) doHeader(ctx context.Context, method, path string, body, out any) (http.Header, error) {
	if c.err != nil {
		return nil, c.err
	}
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(apiv1.ClientHeader, "crucible-cli")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("controller API at %s: %w", c.server, err)
	}
	defer resp.Body.Close()
	if err := redirectError(c.server, resp); err != nil {
		return resp.Header, err
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return resp.Header, fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
		}
		return resp.Header, fmt.Errorf("controller answered %s: %s", resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return resp.Header, nil
	}
	if w, ok := out.(io.Writer); ok {
		_, err := io.Copy(w, resp.Body)
		return resp.Header, err
	}
	return resp.Header, json.NewDecoder(resp.Body).Decode(out)
}

func waitFinished(ctx context.Context, c *apiClient, id string, progress io.Writer) error {
	last := ""
	for {
		var wp apiv1.WorkPod
		if err := c.do(ctx, http.MethodGet, "/api/pods/"+url.PathEscape(id), nil, &wp); err != nil {
			return err
		}
		if string(wp.State) != last {
			fmt.Fprintf(progress, "%s: %s\n", id, wp.State)
			last = string(wp.State)
		}
		switch wp.State {
		case "succeeded":
			return nil
		case "failed", "cancelled", "lost":
			return fmt.Errorf("work pod %s %s: %s", id, wp.State, wp.Reason)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func newPodsCmd() *cobra.Command {
	pods := &cobra.Command{Use: "pods", Short: "List, inspect and cancel work pods"}
	var server, output string
	list, get, cancel := newPodsListCmd(&server, &output), newPodsGetCmd(&server, &output), newPodsCancelCmd(&server)
	for _, c := range []*cobra.Command{list, get, cancel} {
		addServerFlag(c, &server)
	}
	for _, c := range []*cobra.Command{list, get} {
		c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	}
	pods.AddCommand(list, get, cancel)
	return pods
}

func newPodsListCmd(server, output *string) *cobra.Command {
	var cluster, state, kind, cont string
	var limit int
	var watch bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List work pods (newest first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			for k, v := range map[string]string{"cluster": cluster, "state": state, "kind": kind, "continue": cont} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if limit > 0 {
				q.Set("limit", fmt.Sprint(limit))
			}
			var out []apiv1.WorkPod
			h, err := newAPIClient(*server).doHeader(cmd.Context(), http.MethodGet, "/api/pods?"+q.Encode(), nil, &out)
			if err != nil {
				return err
			}
			if next := h.Get(apiv1.ContinueHeader); next != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more work pods: --continue %s\n", next)
			}
			if !watch {
				return printPods(cmd.OutOrStdout(), *output, out)
			}
			if *output == "json" {
				for _, wp := range out { // one object per line, as the changes that follow
					if err := printWatched(cmd.OutOrStdout(), *output, wp); err != nil {
						return err
					}
				}
			} else if err := printPods(cmd.OutOrStdout(), *output, out); err != nil {
				return err
			}
			q.Del("continue")
			q.Del("limit")
			return watchPods(cmd.Context(), newAPIClient(*server), q, *output, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	list.Flags().StringVar(&cluster, "cluster", "", "only this cluster")
	list.Flags().StringVar(&state, "state", "", "only these states (comma-separated)")
	list.Flags().StringVar(&kind, "kind", "", "only this kind (turn, loop)")
	list.Flags().IntVar(&limit, "limit", 0, "at most this many (default: the controller's api.page_size)")
	list.Flags().StringVar(&cont, "continue", "", "the next page: the token the previous page printed")
	list.Flags().BoolVarP(&watch, "watch", "w", false, "after the list, print every change as it happens (GET /api/events; -o json: one object per line); Ctrl-C exits 130")
	return list
}

func newPodsGetCmd(server, output *string) *cobra.Command {
	return &cobra.Command{
		Use:   "get POD",
		Short: "Show one work pod: its row, why it waits, and its history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var wp apiv1.WorkPod
			if err := newAPIClient(*server).do(cmd.Context(), http.MethodGet, "/api/pods/"+url.PathEscape(args[0]), nil, &wp); err != nil {
				return err
			}
			return printPod(cmd.OutOrStdout(), *output, wp, time.Now())
		},
	}
}

func newPodsCancelCmd(server *string) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel POD",
		Short: "Delete the work pod on its spoke and mark it cancelled",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var wp apiv1.WorkPod
			if err := newAPIClient(*server).do(cmd.Context(), http.MethodPost, "/api/pods/"+url.PathEscape(args[0])+"/cancel", nil, &wp); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", wp.ID, wp.State)
			return nil
		},
	}
}

func printPods(w io.Writer, format string, v any) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "table", "":
	default:
		return fmt.Errorf("--output %q: want table or json", format)
	}
	var rows []apiv1.WorkPod
	switch t := v.(type) {
	case []apiv1.WorkPod:
		rows = t
	case apiv1.WorkPod:
		rows = []apiv1.WorkPod{t}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCLUSTER\tKIND\tSTATE\tEXIT\tAGE\tSUBMITTER\tREASON")
	for _, p := range rows {
		exit := ""
		if p.ExitCode != nil {
			exit = fmt.Sprint(*p.ExitCode)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Cluster, p.Kind, p.State, exit, time.Since(p.CreatedAt).Round(time.Second), p.Submitter, podReason(p))
	}
	return tw.Flush()
}

func newLogsCmd() *cobra.Command {
	var server string
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs POD [-f]",
		Short: "Print a work pod's log: the stored log, or with -f live as it is written",
		Long: `logs prints a finished work pod's collected log. With -f it follows the log
live (Server-Sent Events from the controller, reconnecting without repeating a
line), waiting for a pending pod to start; a finished pod's stored log is
printed the same way. The end state goes to standard error, and the exit code
is non-zero unless the pod succeeded. Ctrl-C stops following (exit 130) and
leaves the pod running.`,
		Example: `  crucible logs turn-abc123
  crucible logs -f turn-abc123`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := newAPIClient(server)
			if !follow {
				return c.do(cmd.Context(), http.MethodGet, "/api/pods/"+url.PathEscape(args[0])+"/artifacts/log", nil, cmd.OutOrStdout())
			}
			end, err := followLog(cmd.Context(), c, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return endError(args[0], end, cmd.ErrOrStderr())
		},
	}
	addServerFlag(cmd, &server)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log live until the pod ends")
	return cmd
}

func newArtifactsCmd() *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:   "artifacts POD [KIND]",
		Short: "List a work pod's artifacts, or print one",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := newAPIClient(server)
			base := "/api/pods/" + url.PathEscape(args[0]) + "/artifacts"
			if len(args) == 2 {
				return c.do(cmd.Context(), http.MethodGet, base+"/"+url.PathEscape(args[1]), nil, cmd.OutOrStdout())
			}
			return printArtifacts(cmd.Context(), c, args[0], cmd.OutOrStdout())
		},
	}
	addServerFlag(cmd, &server)
	return cmd
}

// printArtifacts lists a work pod's artifacts as a table.
func printArtifacts(ctx context.Context, c *apiClient, id string, out io.Writer) error {
	var arts []struct {
		Kind   string
		Size   int64
		SHA256 string
	}
	if err := c.do(ctx, http.MethodGet, "/api/pods/"+url.PathEscape(id)+"/artifacts", nil, &arts); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tSIZE\tSHA256")
	for _, a := range arts {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", a.Kind, a.Size, a.SHA256)
	}
	return tw.Flush()
}
