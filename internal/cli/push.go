package cli

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/certpool"
	"crucible.dev/crucible/internal/render"
)

// Exit codes of crucible push (and of every command that sets one).
const (
	ExitRefused = 1 // the drop-box answered no: 400, 401/403, 404, 409, 413
	ExitUsage   = 2 // bad arguments, unreadable file or token
	ExitTimeout = 3 // still unavailable when --timeout ran out
)

// ExitError carries a process exit code to main.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string   { return e.Err.Error() }
func (e *ExitError) Unwrap() error   { return e.Err }
func (e *ExitError) ExitCode() int   { return e.Code }
func exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// Push retry limits.
const (
	pushBackoffInitial = 500 * time.Millisecond
	pushBackoffMax     = 15 * time.Second
	// maxRetryAfter caps a server's Retry-After, so that a wrong header
	// cannot park the pod until --timeout.
	maxRetryAfter = 60 * time.Second
)

type pushOptions struct {
	url, pod, tokenFile, caFile string
	timeout                     time.Duration
}

func newPushCmd() *cobra.Command {
	var o pushOptions
	cmd := &cobra.Command{
		Use:   "push KIND [FILE|-]",
		Short: "Upload a result from inside a work pod to the controller's drop-box",
		Long: `push uploads FILE (or standard input, "-" or no FILE) as the work pod's artifact
KIND, authenticated by the pod's own projected token. It is meant to run inside a
work pod: the drop-box URL, the pod's id and the token file come from the
environment crucible gives every work pod (` + render.EnvIngestURL + `,
` + render.EnvWorkPod + `, ` + render.EnvIngestTokenFile + `); flags override them.

The body is streamed, never held in memory: a file is reopened for every try;
standard input is first spooled to a temporary file (in $TMPDIR) so that it can
be sent again. The token file is read again before every try, so a token the
kubelet rotated meanwhile is used.

503, 429, 408, 502, 504, 507 (the artifact volume is below its free-space
floor) and connection errors are retried, waiting as Retry-After says (at
most 60s) or with exponential backoff, until --timeout.
201 (stored) and 200 (the same bytes were already stored) are success; push
then prints the size and sha256, computed locally and checked against the
drop-box's answer.

Exit codes:
  0  stored (201) or already stored (200)
  1  refused: 409 a different artifact of this kind is already stored,
     401/403 the token was refused, 413 too large, 400/404 bad request,
     or the drop-box reported another sha256 than the one sent
  2  usage: bad arguments, unreadable file or token file, or the
     drop-box's certificate is not trusted (--ca-file, SSL_CERT_FILE)
  3  the drop-box stayed unavailable until --timeout`,
		Example: `  crucible push result out.json
  ./report | crucible push report -`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := "-"
			if len(args) == 2 {
				file = args[1]
			}
			return runPush(cmd.Context(), o, args[0], file, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.url, "url", os.Getenv(render.EnvIngestURL), "drop-box base URL (default $"+render.EnvIngestURL+")")
	f.StringVar(&o.pod, "pod", os.Getenv(render.EnvWorkPod), "work pod id (default $"+render.EnvWorkPod+")")
	f.StringVar(&o.tokenFile, "token-file", os.Getenv(render.EnvIngestTokenFile), "the pod's ingest token file, re-read every try (default $"+render.EnvIngestTokenFile+")")
	f.StringVar(&o.caFile, "ca-file", "", "CA bundle for the drop-box's certificate (default: the system's)")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up retrying after this long")
	return cmd
}

// pushBody is what is sent: a file that can be opened again for each try.
type pushBody struct {
	path   string
	size   int64
	sha256 string
}

func runPush(ctx context.Context, o pushOptions, kind, file string, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := o.check(kind); err != nil {
		return exit(ExitUsage, err)
	}
	client, err := pushClient(o.caFile)
	if err != nil {
		return exit(ExitUsage, err)
	}
	var body pushBody
	if file == "-" {
		body, err = spool(stdin)
		if body.path != "" {
			defer os.Remove(body.path)
		}
	} else {
		body, err = digestFile(file)
	}
	if err != nil {
		return exit(ExitUsage, err)
	}
	target := strings.TrimRight(o.url, "/") + "/api/pods/" + url.PathEscape(o.pod) + "/artifacts/" + url.PathEscape(kind)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	code, err := pushWithRetry(ctx, client, target, o.tokenFile, body, stderr)
	if err != nil {
		return err
	}
	verb := "stored"
	if code == http.StatusOK {
		verb = "already stored"
	}
	fmt.Fprintf(stdout, "%s %s/%s: %d bytes sha256:%s\n", verb, o.pod, kind, body.size, body.sha256)
	return nil
}

func (o pushOptions) check(kind string) error {
	var errs []error
	if !artifact.ValidName(kind) {
		errs = append(errs, fmt.Errorf("KIND %q: must be a DNS label (lowercase letters, digits, '-')", kind))
	}
	if o.url == "" {
		errs = append(errs, fmt.Errorf("no drop-box URL: set --url or $%s", render.EnvIngestURL))
	} else if u, err := url.Parse(o.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--url %q: want an http(s) URL", o.url))
	}
	if o.pod == "" {
		errs = append(errs, fmt.Errorf("no work pod id: set --pod or $%s", render.EnvWorkPod))
	} else if !artifact.ValidName(o.pod) {
		errs = append(errs, fmt.Errorf("--pod %q: must be a DNS label", o.pod))
	}
	if o.tokenFile == "" {
		errs = append(errs, fmt.Errorf("no token file: set --token-file or $%s", render.EnvIngestTokenFile))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: must be positive", o.timeout))
	}
	return errors.Join(errs...)
}

func pushClient(caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pool, err := certpool.Load(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}, nil
}

// spool copies stdin to a temporary file once, hashing it on the way.
func spool(r io.Reader) (pushBody, error) {
	f, err := os.CreateTemp("", "crucible-push-*")
	if err != nil {
		return pushBody{}, fmt.Errorf("spool standard input: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	body := pushBody{path: f.Name(), size: n, sha256: hex.EncodeToString(h.Sum(nil))}
	if err != nil {
		return body, fmt.Errorf("spool standard input: %w", err)
	}
	return body, f.Close()
}

func digestFile(path string) (pushBody, error) {
	f, err := os.Open(path)
	if err != nil {
		return pushBody{}, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return pushBody{}, fmt.Errorf("%s: not a regular file (pipe it to `crucible push KIND -`)", path)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return pushBody{}, fmt.Errorf("read %s: %w", path, err)
	}
	return pushBody{path: path, size: n, sha256: hex.EncodeToString(h.Sum(nil))}, nil
}

// newCopySelfCmd is what the push_image init container runs: it copies this
// binary into DIR (an emptyDir the work container mounts), atomically.
func newCopySelfCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "copy-self DIR",
		Short:  "Copy the crucible binary into DIR (the work pod's init container)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary: %w", err)
			}
			return copyExecutable(self, filepath.Join(args[0], "crucible"))
		},
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".crucible-*")
	if err != nil {
		return fmt.Errorf("copy crucible: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy crucible: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
