package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"crucible.dev/crucible/internal/serverpin"
)

// The server pins' checks are package serverpin's; these name its refusals
// where the plugin's callers and tests know them.
var (
	ErrNoPins      = serverpin.ErrNoPins
	ErrServerPin   = serverpin.ErrServerPin
	ErrAudiencePin = serverpin.ErrAudiencePin
	// ErrTokenDir: a tokenFile that resolves outside CRUCIBLE_TOKEN_DIR.
	ErrTokenDir = errors.New("token dir check failed")
)

// insideTokenDir refuses a tokenFile from the cluster config that resolves
// (every symlink followed) outside the token directory: the config is the
// ClusterProfile writer's, and the consumer's other files (its own hub
// token above all) are not theirs to hand out.
func insideTokenDir(file, tokenDir string) error {
	dir, err := filepath.EvalSymlinks(tokenDir)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrTokenDir, tokenDirEnv, tokenDir, err)
	}
	real, err := filepath.EvalSymlinks(file)
	if err != nil {
		return fmt.Errorf("%w: spec.cluster.config.tokenFile %s: %w", ErrTokenDir, file, err)
	}
	rel, err := filepath.Rel(dir, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return fmt.Errorf("%w: spec.cluster.config.tokenFile %s resolves to %s, outside %s=%s", ErrTokenDir, file, real, tokenDirEnv, dir)
	}
	return nil
}
