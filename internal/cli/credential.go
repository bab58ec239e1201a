package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientauthv1beta1 "k8s.io/client-go/pkg/apis/clientauthentication/v1beta1"

	"crucible.dev/crucible/internal/jwt"
)

// execInfoEnv is the variable client-go's exec authenticator describes the
// ExecCredential it wants in (apiVersion, kind, spec).
const execInfoEnv = "KUBERNETES_EXEC_INFO"

// Errors of the credential plugin, wrapped with the file's name so a user
// reading kubectl's output knows which volume to look at.
var (
	ErrTokenExpired    = errors.New("token expired")
	ErrTokenMalformed  = errors.New("not a service-account token")
	ErrExecInfoVersion = errors.New("unsupported ExecCredential apiVersion")
)

func newCredentialCmd() *cobra.Command {
	var tokenFile string
	cmd := &cobra.Command{
		Use:   "credential --token-file FILE",
		Short: "Hand a projected service-account token to kubectl or any client-go tool (exec credential plugin)",
		Long: `credential is a client-go exec credential plugin: it prints an ExecCredential
(client.authentication.k8s.io/v1, or v1beta1 when KUBERNETES_EXEC_INFO asks for
it) holding the projected service-account token in --token-file and its expiry
(the token's exp claim). The kubelet rotates that file; client-go runs the
plugin again when the expiry passes or a request gets 401, so a tool reaches a
spoke through crucible's federation (the spoke's authn webhook) with no stored
secret.

It refuses an unreadable, empty, malformed or expired token file with an error
naming the file, rather than handing out a token the spoke would refuse.`,
		Example: `  # a kubeconfig user for the spoke wharf (see docs/cli.md)
  users:
  - name: crucible-wharf
    user:
      exec:
        apiVersion: client.authentication.k8s.io/v1
        command: crucible
        args: [credential, --token-file, /var/run/secrets/crucible/wharf/token]
        interactiveMode: Never`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := readTokenFile(tokenFile)
			if err != nil {
				return err
			}
			out, err := execCredential(os.Getenv(execInfoEnv), token, tokenFile, time.Now())
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "the projected service-account token to hand out (required)")
	_ = cmd.MarkFlagRequired("token-file")
	return cmd
}

// readTokenFile reads at most jwt.MaxTokenBytes: a projected token is about
// 1 KiB, and a file much larger is not one (a wrong path such as a log).
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, jwt.MaxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	if len(data) > jwt.MaxTokenBytes {
		return "", fmt.Errorf("token file %s: larger than %d bytes: %w", path, jwt.MaxTokenBytes, ErrTokenMalformed)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("token file %s: empty: %w", path, ErrTokenMalformed)
	}
	return token, nil
}

// execCredential builds the ExecCredential for token (read from file) in the
// apiVersion execInfo asks for (v1 when execInfo is empty, as when run by
// hand). The token must carry an exp in the future: client-go caches the
// credential until expirationTimestamp, and an expired one would only turn
// into a 401 on the spoke with no hint at the file.
func execCredential(execInfo, token, file string, now time.Time) ([]byte, error) {
	apiVersion := clientauthv1.SchemeGroupVersion.String()
	if execInfo != "" {
		var info metav1.TypeMeta
		if err := json.Unmarshal([]byte(execInfo), &info); err != nil {
			return nil, fmt.Errorf("%s: %w", execInfoEnv, err)
		}
		apiVersion = info.APIVersion
	}
	tok, err := jwt.Parse(token)
	if err != nil {
		// The ParseError never contains the token.
		return nil, fmt.Errorf("token file %s: %w: %w", file, ErrTokenMalformed, err)
	}
	exp := tok.Claims.Expiry
	if exp.IsZero() {
		return nil, fmt.Errorf("token file %s: no exp claim: %w", file, ErrTokenMalformed)
	}
	if !now.Before(exp) {
		return nil, fmt.Errorf("token file %s: %w at %s (%s ago); is the projected volume mounted and the kubelet rotating it?",
			file, ErrTokenExpired, exp.UTC().Format(time.RFC3339), now.Sub(exp).Round(time.Second))
	}
	expiry := metav1.NewTime(exp)
	var cred any
	switch apiVersion {
	case clientauthv1.SchemeGroupVersion.String():
		cred = clientauthv1.ExecCredential{
			TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "ExecCredential"},
			Status:   &clientauthv1.ExecCredentialStatus{Token: token, ExpirationTimestamp: &expiry},
		}
	case clientauthv1beta1.SchemeGroupVersion.String():
		cred = clientauthv1beta1.ExecCredential{
			TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "ExecCredential"},
			Status:   &clientauthv1beta1.ExecCredentialStatus{Token: token, ExpirationTimestamp: &expiry},
		}
	default:
		return nil, fmt.Errorf("%s: %w %q (want %s or %s)", execInfoEnv, ErrExecInfoVersion, apiVersion,
			clientauthv1.SchemeGroupVersion, clientauthv1beta1.SchemeGroupVersion)
	}
	out, err := json.Marshal(cred)
	if err != nil {
		return nil, fmt.Errorf("encode ExecCredential: %w", err)
	}
	return append(out, '\n'), nil
}
