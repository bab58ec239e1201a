package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"k8s.io/apimachinery/pkg/util/validation"

	"crucible.dev/crucible/internal/jwt"
)

const (
	// MaxStateBytes bounds one provider's persisted state: a discovery
	// document and a JWKS are a few KiB each, and it is read whole at start.
	MaxStateBytes = 1 << 20

	// stateVersion is the format written; any other is refused.
	stateVersion = 1

	// stateClockSkew is how far in the future a persisted fetch time may
	// be (another node's clock) before the file is refused: a future fetch
	// time would stretch maxKeyAge.
	stateClockSkew = time.Minute
)

// errStateRefused wraps every reason a persisted file is not trusted.
var errStateRefused = errors.New("persisted provider keys refused")

// persisted is one provider's state file: the documents as fetched, and
// what they were fetched for. It is public data, but it is a trust root:
// what it holds verifies tokens after a restart.
type persisted struct {
	Version      int             `json:"version"`
	Provider     string          `json:"provider"`
	Issuer       string          `json:"issuer"`
	DiscoveryURL string          `json:"discoveryURL"`
	FetchedAt    time.Time       `json:"fetchedAt"`
	Discovery    json.RawMessage `json:"discovery"`
	JWKS         json.RawMessage `json:"jwks"`
}

// StateStore is where each provider's last fetched keys outlive the
// process: a directory (StateDir) or a ConfigMap (StateConfigMap). Both
// hold the same bytes per provider, decoded and trusted by the same rules
// (decodeState, trustState): the store only keeps them.
type StateStore interface {
	// read returns what write last stored for provider; nothing stored
	// yet wraps fs.ErrNotExist.
	read(ctx context.Context, provider string) ([]byte, error)
	write(ctx context.Context, p persisted) error
	// String names the store in log lines.
	String() string
}

// StateDir is a StateStore of one file per provider under dir
// (--state-dir).
func StateDir(dir string) StateStore { return stateDir(dir) }

// stateDir persists providers' keys under one directory, one file per
// provider.
type stateDir string

func (d stateDir) String() string { return "dir " + string(d) }

// path is the provider's file. Config validation makes every name a DNS
// label; anything else could name a path elsewhere and is refused.
func (d stateDir) path(provider string) (string, error) {
	name, err := stateName(provider)
	if err != nil {
		return "", err
	}
	return filepath.Join(string(d), name), nil
}

// stateName is the provider's file name, and its key in a ConfigMap.
// Config validation makes every provider name a DNS label; anything else
// could name a path elsewhere and is refused.
func stateName(provider string) (string, error) {
	if msgs := validation.IsDNS1123Label(provider); len(msgs) > 0 {
		return "", fmt.Errorf("provider name %q cannot name a state file: %s", provider, msgs[0])
	}
	return "provider-" + provider + ".json", nil
}

// encodeState is p as stored, refused over MaxStateBytes.
func encodeState(p persisted) ([]byte, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxStateBytes {
		return nil, fmt.Errorf("state of provider %s is %d bytes, more than %d", p.Provider, len(data), MaxStateBytes)
	}
	return data, nil
}

// write replaces the provider's file atomically: a temp file in the same
// directory (0600), fsynced, renamed over it, the directory fsynced. A
// crash leaves the old file or the new one, never a mix.
func (d stateDir) write(_ context.Context, p persisted) error {
	path, err := d.path(p.Provider)
	if err != nil {
		return err
	}
	data, err := encodeState(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	tmp, err := os.CreateTemp(string(d), ".provider-"+p.Provider+"-*.tmp")
	if err != nil {
		return fmt.Errorf("create temp state file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing left to remove
	if err := writeSynced(tmp, data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename state file: %w", err)
	}
	if df, err := os.Open(string(d)); err == nil { // best effort: some filesystems refuse
		_ = df.Sync()
		df.Close()
	}
	return nil
}

func writeSynced(f *os.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// read returns the provider's file, refusing anything but a regular file
// (a symlink could point at any file the process may read) of at most
// MaxStateBytes. A missing file wraps fs.ErrNotExist.
func (d stateDir) read(_ context.Context, provider string) ([]byte, error) {
	path, err := d.path(provider)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symlink", errStateRefused, path)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file (%s)", errStateRefused, path, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxStateBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxStateBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", errStateRefused, path, MaxStateBytes)
	}
	return data, nil
}

// decodeState decodes a state file strictly (unknown fields, trailing data
// and any other version are errors) and returns it with its usable keys.
// It checks the file against itself only; trustState checks it against
// the provider.
func decodeState(data []byte) (persisted, []jose.JSONWebKey, error) {
	var p persisted
	if len(data) > MaxStateBytes {
		return p, nil, fmt.Errorf("%w: larger than %d bytes", errStateRefused, MaxStateBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, nil, fmt.Errorf("%w: %w", errStateRefused, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return p, nil, fmt.Errorf("%w: data after the state object", errStateRefused)
	}
	switch {
	case p.Version != stateVersion:
		return p, nil, fmt.Errorf("%w: version %d, want %d", errStateRefused, p.Version, stateVersion)
	case p.Provider == "" || p.Issuer == "" || p.DiscoveryURL == "" || p.FetchedAt.IsZero():
		return p, nil, fmt.Errorf("%w: provider, issuer, discoveryURL and fetchedAt are required", errStateRefused)
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(p.Discovery, &doc); err != nil || doc.Issuer != p.Issuer {
		return p, nil, fmt.Errorf("%w: discovery document does not name issuer %q", errStateRefused, p.Issuer)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(p.JWKS, &set); err != nil {
		return p, nil, fmt.Errorf("%w: jwks: %w", errStateRefused, err)
	}
	keys, _ := jwt.UsableKeys(set.Keys)
	if len(keys) == 0 {
		return p, nil, fmt.Errorf("%w: jwks has no usable signing keys", errStateRefused)
	}
	return p, keys, nil
}

// trustState is the seed of src's key set from a decoded state file, or
// why the file is not src's or is too old at now.
func trustState(p persisted, keys []jose.JSONWebKey, src keySource, now time.Time) (*jwt.Seed, error) {
	switch {
	case p.Provider != src.provider:
		return nil, fmt.Errorf("%w: written for provider %q", errStateRefused, p.Provider)
	case p.Issuer != src.issuer:
		return nil, fmt.Errorf("%w: written for issuer %q, configured %q", errStateRefused, p.Issuer, src.issuer)
	case p.DiscoveryURL != src.discoveryURL:
		return nil, fmt.Errorf("%w: written for discovery URL %q, configured %q", errStateRefused, p.DiscoveryURL, src.discoveryURL)
	case p.FetchedAt.After(now.Add(stateClockSkew)):
		return nil, fmt.Errorf("%w: fetched at %s, in the future", errStateRefused, p.FetchedAt.UTC().Format(time.RFC3339))
	}
	if age := now.Sub(p.FetchedAt); age >= src.maxKeyAge {
		return nil, fmt.Errorf("%w: fetched %s ago, older than maxKeyAge %s", errStateRefused, age.Round(time.Second), src.maxKeyAge)
	}
	return &jwt.Seed{Keys: keys, FetchedAt: p.FetchedAt, Expires: p.FetchedAt.Add(src.maxKeyAge)}, nil
}
