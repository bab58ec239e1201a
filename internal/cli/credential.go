package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientauthv1beta1 "k8s.io/client-go/pkg/apis/clientauthentication/v1beta1"
	kjson "sigs.k8s.io/json"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/serverpin"
)

// execInfoEnv is the variable client-go's exec authenticator describes the
// ExecCredential it wants in (apiVersion, kind, spec).
const execInfoEnv = "KUBERNETES_EXEC_INFO"

// tokenDirEnv overrides where a cluster config's token is looked for when it
// names no tokenFile; defaultTokenDir is the hub chart's layout of projected
// tokens (deploy/helm/crucible-hub: /var/run/secrets/crucible/<spoke>/token),
// so a consumer pod mounted the same way needs no setting at all.
const (
	tokenDirEnv     = "CRUCIBLE_TOKEN_DIR"
	defaultTokenDir = "/var/run/secrets/crucible" //nolint:gosec // G101: a mount path, not a credential
)

// maxClusterConfigBytes bounds spec.cluster.config before it is decoded:
// crucible's is three short strings, and anything near this is not one.
const maxClusterConfigBytes = 64 << 10

// Errors of the credential plugin, wrapped with the file's name (or the
// exec info's field) so a user reading kubectl's or a controller's output
// knows which volume or which ClusterProfile to look at.
var (
	ErrTokenExpired    = errors.New("token expired")
	ErrTokenMalformed  = errors.New("not a service-account token")
	ErrExecInfoVersion = errors.New("unsupported ExecCredential apiVersion")
	// ErrNoClusterConfig: neither --token-file nor the cluster's exec
	// extension says which spoke's token to hand out.
	ErrNoClusterConfig = errors.New("no cluster config")
	// ErrClusterConfig is wrapped by every refusal of spec.cluster.config.
	ErrClusterConfig = errors.New("invalid cluster config")
	// ErrTokenAudience: the token would be refused by (or, worse, accepted
	// for) another spoke than the one the config names.
	ErrTokenAudience = errors.New("token for another audience")
)

func newCredentialCmd() *cobra.Command {
	var fl credentialFlags
	cmd := &cobra.Command{
		Use:   "credential [--token-file FILE] [--server-pins FILE]",
		Short: "Hand a projected service-account token to kubectl or any client-go tool (exec credential plugin, ClusterProfile access provider)",
		Long: `credential is a client-go exec credential plugin: it prints an ExecCredential
(client.authentication.k8s.io/v1, or v1beta1 when KUBERNETES_EXEC_INFO asks for
it) holding a projected service-account token and its expiry (the token's exp
claim). The kubelet rotates the file; client-go runs the plugin again when the
expiry passes or a request gets 401, so a tool reaches a spoke through
crucible's federation (the spoke's authn webhook) with no stored secret.

With --token-file, the token is that file's (a kubeconfig user per spoke).

Without it, credential is a ClusterProfile access provider (KEP-4322's
credentials library, Kueue MultiKueue): one exec config with
provideClusterInfo: true serves every spoke, and the spoke comes from the
cluster's client.authentication.k8s.io/exec extension, which client-go passes
as KUBERNETES_EXEC_INFO's spec.cluster.config:

  {"cluster": "wharf", "tokenFile": "/path/to/token", "audience": "wharf"}

  cluster    the spoke's name in crucible's fleet (a DNS label); required
  tokenFile  default $CRUCIBLE_TOKEN_DIR/<cluster>/token, with CRUCIBLE_TOKEN_DIR
             default /var/run/secrets/crucible (the hub chart's layout of
             projected tokens); if given, it must resolve, symlinks followed,
             inside CRUCIBLE_TOKEN_DIR
  audience   if given, it must be the pinned audience (below)

Whoever writes a ClusterProfile's status chooses which spoke, never where its
token goes: --server-pins FILE, the consumer's own configuration (crucible
render clusterprofile --server-pins; the hub chart's ConfigMap key
server-pins.json), pins per spoke the server, CA and audience:

  {"clusters": [{"name": "wharf", "server": "https://api.wharf.example.com:6443",
    "certificate-authority-data": "<base64 PEM>", "audience": "wharf"}]}

The token is handed out only if spec.cluster.server is the pinned server
(compared as client-go dials it: scheme and host case, the default port and
a trailing slash do not matter; a missing server is refused), its
certificate-authority-data holds the pinned CAs (none, if the pin has none),
it sets no insecure-skip-tls-verify, tls-server-name or proxy-url, and the
token's aud is exactly the pinned audience (default the cluster name). With
--token-file and a config, the file is --token-file's and every check still
applies.

Each refusal names its check on stderr (client-go itself reports only the
exit status): no server pins, server pin check failed, audience pin check
failed, token dir check failed, token for another audience, invalid cluster
config, and an unreadable, empty, malformed or expired token, naming the file
or key. Nothing is printed on stdout then, so no request carries a token.`,
		Example: `  # a kubeconfig user for the spoke wharf (see docs/cli.md)
  users:
  - name: crucible-wharf
    user:
      exec:
        apiVersion: client.authentication.k8s.io/v1
        command: crucible
        args: [credential, --token-file, /var/run/secrets/crucible/wharf/token]
        interactiveMode: Never

  # a ClusterProfile consumer's provider file (--clusterprofile-provider-file)
  {"providers": [{"name": "crucible", "execConfig": {
    "apiVersion": "client.authentication.k8s.io/v1", "command": "crucible",
    "args": ["credential", "--server-pins", "/etc/crucible/clusterprofile/server-pins.json"],
    "provideClusterInfo": true, "interactiveMode": "Never"}}]}

  # and the ClusterProfile wharf's status.accessProviders entry
  - name: crucible
    cluster:
      server: https://api.wharf.example.com:6443
      certificate-authority-data: <base64 PEM>
      extensions:
      - name: client.authentication.k8s.io/exec
        extension: {cluster: wharf}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl.tokenDir = os.Getenv(tokenDirEnv)
			out, err := credential(os.Getenv(execInfoEnv), fl, time.Now())
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().StringVar(&fl.tokenFile, "token-file", "",
		"the projected service-account token to hand out (default: the one the cluster's exec extension names)")
	cmd.Flags().StringVar(&fl.serverPins, "server-pins", "",
		"the consumer's pins: per spoke, the server, CA and audience its token may go to (JSON; required with a cluster config; crucible render clusterprofile --server-pins)")
	return cmd
}

// credential answers one exec request: which token the request and the flag
// name, read, checked against the cluster it is for, in the version asked.
func credential(execInfo string, fl credentialFlags, now time.Time) ([]byte, error) {
	req, err := parseExecInfo(execInfo)
	if err != nil {
		return nil, err
	}
	src, err := pickToken(req, fl)
	if err != nil {
		return nil, err
	}
	token, err := readTokenFile(src.file)
	if err != nil {
		return nil, err
	}
	return execCredential(req.apiVersion, token, src, now)
}

// execRequest is what KUBERNETES_EXEC_INFO says.
type execRequest struct {
	present    bool // the variable was set (client-go always sets it)
	apiVersion string
	hasCluster bool              // spec.cluster, sent only with provideClusterInfo: true
	cluster    serverpin.Cluster // spec.cluster's connection, checked against the pin
	config     []byte            // spec.cluster.config; nil when absent or null
}

// parseExecInfo reads env (v1 when empty, as when run by hand) with
// client-go's own types for the version it names, so spec.cluster.config
// arrives exactly as client-go encoded the cluster's extension.
func parseExecInfo(env string) (execRequest, error) {
	req := execRequest{apiVersion: clientauthv1.SchemeGroupVersion.String()}
	if env == "" {
		return req, nil
	}
	var meta metav1.TypeMeta
	if err := json.Unmarshal([]byte(env), &meta); err != nil {
		return execRequest{}, fmt.Errorf("%s: %w", execInfoEnv, err)
	}
	req.present, req.apiVersion = true, meta.APIVersion
	var err error
	switch meta.APIVersion {
	case clientauthv1.SchemeGroupVersion.String():
		var info clientauthv1.ExecCredential
		err = json.Unmarshal([]byte(env), &info)
		if c := info.Spec.Cluster; c != nil {
			req.hasCluster, req.config = true, c.Config.Raw
			req.cluster = serverpin.Cluster{Server: c.Server, TLSServerName: c.TLSServerName, ProxyURL: c.ProxyURL,
				Insecure: c.InsecureSkipTLSVerify, CAData: c.CertificateAuthorityData}
		}
	case clientauthv1beta1.SchemeGroupVersion.String():
		var info clientauthv1beta1.ExecCredential
		err = json.Unmarshal([]byte(env), &info)
		if c := info.Spec.Cluster; c != nil {
			req.hasCluster, req.config = true, c.Config.Raw
			req.cluster = serverpin.Cluster{Server: c.Server, TLSServerName: c.TLSServerName, ProxyURL: c.ProxyURL,
				Insecure: c.InsecureSkipTLSVerify, CAData: c.CertificateAuthorityData}
		}
	default:
		return execRequest{}, fmt.Errorf("%s: %w %q (want %s or %s)", execInfoEnv, ErrExecInfoVersion, meta.APIVersion,
			clientauthv1.SchemeGroupVersion, clientauthv1beta1.SchemeGroupVersion)
	}
	if err != nil {
		return execRequest{}, fmt.Errorf("%s: %w", execInfoEnv, err)
	}
	return req, nil
}

// clusterConfig is crucible's client.authentication.k8s.io/exec extension
// on a cluster (a ClusterProfile's status.accessProviders[].cluster, or a
// kubeconfig cluster): which spoke the cluster is, so that one provider
// entry serves the whole fleet.
type clusterConfig struct {
	Cluster   string  `json:"cluster"`
	TokenFile *string `json:"tokenFile,omitempty"`
	Audience  *string `json:"audience,omitempty"`
}

// configPath is where client-go puts the extension in the exec info.
var configPath = field.NewPath("spec", "cluster", "config")

// parseClusterConfig decodes raw strictly (exact key names, no unknown or
// repeated key: with two "cluster" keys, which one a reader takes decides
// whose token is handed out) and reports every problem at once.
func parseClusterConfig(raw []byte) (clusterConfig, error) {
	if len(raw) > maxClusterConfigBytes {
		return clusterConfig{}, fmt.Errorf("%s %s: %w: larger than %d bytes", execInfoEnv, configPath, ErrClusterConfig, maxClusterConfigBytes)
	}
	var c clusterConfig
	strict, err := kjson.UnmarshalStrict(raw, &c)
	if err != nil {
		return clusterConfig{}, fmt.Errorf(`%s %s: %w: want a JSON object such as {"cluster": "wharf"}: %w`, execInfoEnv, configPath, ErrClusterConfig, err)
	}
	problems := make([]string, 0, len(strict))
	for _, e := range strict {
		problems = append(problems, fmt.Sprintf("%s: %v", configPath, e))
	}
	for _, e := range c.validate(configPath) {
		problems = append(problems, e.Error())
	}
	if len(problems) > 0 {
		return clusterConfig{}, fmt.Errorf("%s: %w: %s", execInfoEnv, ErrClusterConfig, strings.Join(problems, "; "))
	}
	return c, nil
}

// validate holds the config to the fleet's rules: the cluster is a DNS
// label, as internal/profile requires of [[clusters]] name (and so the chart's
// token directory per spoke); tokenFile is absolute and climbs nowhere, since
// the consumer's working directory is nobody's decision here.
func (c clusterConfig) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case c.Cluster == "":
		errs = append(errs, field.Required(path.Child("cluster"), "the spoke's name in crucible's fleet"))
	case len(validation.IsDNS1123Label(c.Cluster)) > 0:
		errs = append(errs, field.Invalid(path.Child("cluster"), httperr.Truncate(c.Cluster, 100), "must be a DNS label (a fleet cluster name)"))
	}
	if c.TokenFile != nil {
		p := *c.TokenFile
		switch {
		case !filepath.IsAbs(p):
			errs = append(errs, field.Invalid(path.Child("tokenFile"), httperr.Truncate(p, 200), "must be an absolute path"))
		case slices.Contains(strings.Split(p, "/"), ".."):
			errs = append(errs, field.Invalid(path.Child("tokenFile"), httperr.Truncate(p, 200), "must not contain .."))
		}
	}
	if c.Audience != nil && *c.Audience == "" {
		errs = append(errs, field.Invalid(path.Child("audience"), "", "must not be empty (omit it for the cluster name)"))
	}
	return errs
}

// tokenSource is the file to hand out and the audience its token must
// carry; audience is empty only for --token-file with no cluster config,
// where the kubeconfig user itself is the choice of spoke.
type tokenSource struct {
	file     string
	cluster  string
	audience string
}

// credentialFlags are what the consumer itself configured: its exec args
// and env, never the ClusterProfile.
type credentialFlags struct {
	tokenFile  string // --token-file
	tokenDir   string // CRUCIBLE_TOKEN_DIR
	serverPins string // --server-pins
}

// pickToken decides which file serves the request. --token-file wins for
// the file (an operator's explicit choice). A cluster config (from a
// ClusterProfile) only names the spoke: the spoke's pin, from the
// consumer's --server-pins, decides the server the token may go to and the
// audience it must carry, and a tokenFile it names must lie inside the
// token directory.
func pickToken(req execRequest, fl credentialFlags) (tokenSource, error) {
	if req.config == nil {
		if fl.tokenFile != "" {
			return tokenSource{file: fl.tokenFile}, nil
		}
		return tokenSource{}, noConfigError(req)
	}
	cfg, err := parseClusterConfig(req.config)
	if err != nil {
		return tokenSource{}, err
	}
	pins, err := serverpin.Load(fl.serverPins)
	if err != nil {
		return tokenSource{}, err
	}
	pin, ok := pins[cfg.Cluster]
	if !ok {
		return tokenSource{}, fmt.Errorf("%w: cluster %s has no pin in --server-pins %s", ErrServerPin, cfg.Cluster, fl.serverPins)
	}
	if err := serverpin.Check(pin, req.cluster); err != nil {
		return tokenSource{}, err
	}
	src := tokenSource{file: fl.tokenFile, cluster: cfg.Cluster, audience: serverpin.Audience(pin)}
	if cfg.Audience != nil && *cfg.Audience != src.audience {
		return tokenSource{}, fmt.Errorf("%w: cluster %s: spec.cluster.config.audience %q is not the pinned audience %q",
			ErrAudiencePin, cfg.Cluster, httperr.Truncate(*cfg.Audience, 200), src.audience)
	}
	if src.file != "" {
		return src, nil
	}
	tokenDir := fl.tokenDir
	if tokenDir == "" {
		tokenDir = defaultTokenDir
	}
	if !filepath.IsAbs(tokenDir) {
		return tokenSource{}, fmt.Errorf("%s %q: must be an absolute path", tokenDirEnv, tokenDir)
	}
	if cfg.TokenFile == nil {
		src.file = filepath.Join(tokenDir, cfg.Cluster, "token")
		return src, nil
	}
	if err := insideTokenDir(*cfg.TokenFile, tokenDir); err != nil {
		return tokenSource{}, err
	}
	src.file = *cfg.TokenFile
	return src, nil
}

// noConfigError says what is missing for the request to name a spoke.
func noConfigError(req execRequest) error {
	const ext = `the cluster's client.authentication.k8s.io/exec extension {"cluster": NAME}`
	switch {
	case !req.present:
		return fmt.Errorf("%w: no --token-file and no %s: give --token-file, or run as a client-go exec plugin with provideClusterInfo: true and %s",
			ErrNoClusterConfig, execInfoEnv, ext)
	case !req.hasCluster:
		return fmt.Errorf("%w: %s has no spec.cluster: set provideClusterInfo: true in the exec config, or give --token-file",
			ErrNoClusterConfig, execInfoEnv)
	default:
		return fmt.Errorf("%w: %s has no %s: give %s (a ClusterProfile's status.accessProviders[].cluster.extensions), or --token-file",
			ErrNoClusterConfig, execInfoEnv, configPath, ext)
	}
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

// tokenReread is how long client-go keeps a credential of a token file
// before it runs the plugin again: the kubelet rewrites a projected token at
// 80 % of its life, and a consumer that waited for exp would keep the
// replaced one to its last moment (a rotation would be seen only then).
// client-go re-reads a kubeconfig's tokenFile every minute; so does this.
const tokenReread = time.Minute

// credentialExpiry is when client-go should ask again: in tokenReread, or at
// the token's exp if that comes first.
func credentialExpiry(now, exp time.Time) time.Time {
	if reread := now.Add(tokenReread); reread.Before(exp) {
		return reread
	}
	return exp
}

// onlyAudience: aud names want and nothing else. A token that some other
// server would accept too is refused even for the right spoke: the spoke
// could replay it there.
func onlyAudience(aud []string, want string) bool {
	return len(aud) > 0 && !slices.ContainsFunc(aud, func(a string) bool { return a != want })
}

// execCredential builds the ExecCredential for token (read from src.file)
// in apiVersion. The token must be for src.audience, when the request names
// a cluster, and carry an exp in the future: client-go caches the
// credential until expirationTimestamp, and an expired or misdirected one
// would only turn into a 401 on the spoke with no hint at the file.
func execCredential(apiVersion, token string, src tokenSource, now time.Time) ([]byte, error) {
	file := src.file
	tok, err := jwt.Parse(token)
	if err != nil {
		// The ParseError never contains the token.
		return nil, fmt.Errorf("token file %s: %w: %w", file, ErrTokenMalformed, err)
	}
	if src.audience != "" && !onlyAudience(tok.Claims.Audience, src.audience) {
		return nil, fmt.Errorf("token file %s: %w: its aud %q is not exactly %q, the audience of cluster %s",
			file, ErrTokenAudience, tok.Claims.Audience, src.audience, src.cluster)
	}
	exp := tok.Claims.Expiry
	if exp.IsZero() {
		return nil, fmt.Errorf("token file %s: no exp claim: %w", file, ErrTokenMalformed)
	}
	if !now.Before(exp) {
		return nil, fmt.Errorf("token file %s: %w at %s (%s ago); is the projected volume mounted and the kubelet rotating it?",
			file, ErrTokenExpired, exp.UTC().Format(time.RFC3339), now.Sub(exp).Round(time.Second))
	}
	expiry := metav1.NewTime(credentialExpiry(now, exp))
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
